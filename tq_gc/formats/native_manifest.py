"""The native manifest format, tq-gc/manifest/v1: the document a checkpoint writes to name the rows a
restore will still need (docs/configuration.md, "The native manifest"), as both sides use it. The writer is
tq_gc/publish/manifest.py (write_manifest), the reader tq_gc/references/manifests/native.py.

    {"format": "tq-gc/manifest/v1", "manifest_id": "ckpt-000123", "state": "active",
     "rows": {"rollout_staging": ["__generation_cut__/ckpt-000123/r7_g0_a1/call3/0"]}}

`state: retired` releases every row (its `rows` may then be left out). Anything else of the wrong shape
is refused with ValueError saying what is wrong: a manifest misread as empty would release its rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

FORMAT = "tq-gc/manifest/v1"
ManifestState = Literal["active", "retired"]
STATES: tuple[ManifestState, ...] = ("active", "retired")
RETIRED: ManifestState = "retired"


def checked_state(state: str) -> ManifestState:
    """`state` if it is one of STATES, else ValueError."""
    for known in STATES:
        if state == known:
            return known
    raise ValueError(f"state must be one of {', '.join(STATES)}, not {state!r}")


def manifest_document(
    manifest_id: str, rows: Mapping[str, Sequence[str]], state: ManifestState = "active"
) -> dict[str, object]:
    """The JSON document of a native manifest."""
    return {
        "format": FORMAT,
        "manifest_id": manifest_id,
        "state": checked_state(state),
        "rows": {partition: list(keys) for partition, keys in rows.items()},
    }


def named_rows(document: Any) -> list[tuple[str, str]]:
    """The (partition, key) rows a parsed native manifest keeps: none once retired. ValueError saying
    what is wrong with a document that is not one."""
    if not isinstance(document, dict):
        raise ValueError(f"must hold a JSON object, not {type(document).__name__}")
    if document.get("format") != FORMAT:
        raise ValueError(f"format is {document.get('format')!r}, expected {FORMAT!r}")
    if not isinstance(document.get("manifest_id"), str):
        raise ValueError(f"manifest_id is {document.get('manifest_id')!r}, expected a string")
    state = document.get("state")
    if state not in STATES:
        raise ValueError(f"state is {state!r}, expected one of {', '.join(STATES)}")
    if state == RETIRED and "rows" not in document:
        return []
    rows = _rows(document.get("rows"))
    return [] if state == RETIRED else rows


def _rows(table: Any) -> list[tuple[str, str]]:
    if not isinstance(table, dict):
        raise ValueError("rows must be an object {partition: [keys]}")
    rows: list[tuple[str, str]] = []
    for partition, keys in table.items():
        if not isinstance(keys, list):
            raise ValueError(f"rows[{partition!r}] must be a list of keys")
        for index, key in enumerate(keys):
            if not isinstance(key, str):
                raise ValueError(f"rows[{partition!r}][{index}] is {key!r}, expected a key string")
            rows.append((partition, key))
    return rows
