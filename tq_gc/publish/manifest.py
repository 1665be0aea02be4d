"""The native manifest format, tq-gc/manifest/v1, and its atomic writer: what a checkpoint writes to name
the rows a restore will still need.

    write_manifest("/ckpt/step-7/gc-manifest.json", "ckpt-7", {"rollout_staging": [key, ...]})
    write_manifest(path, "ckpt-7", {}, state="retired")    # or delete the file: its rows are released

A sweep reads a manifest as a whole or fails closed, so a half-written file must never be visible: the
document goes to a temporary file in the same directory, is flushed to disk, and replaces the manifest
in one rename (readers see the old file or the new one). Reader: tq_gc/references/manifests.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

NATIVE_FORMAT = "tq-gc/manifest/v1"
NATIVE_STATES = ("active", "retired")


def manifest_document(
    manifest_id: str, rows: Mapping[str, Sequence[str]], state: Literal["active", "retired"] = "active"
) -> dict[str, object]:
    """The JSON document of a native manifest."""
    if state not in NATIVE_STATES:
        raise ValueError(f"state must be one of {', '.join(NATIVE_STATES)}, not {state!r}")
    return {
        "format": NATIVE_FORMAT,
        "manifest_id": manifest_id,
        "state": state,
        "rows": {partition: list(keys) for partition, keys in rows.items()},
    }


def write_manifest(
    path: str | Path,
    manifest_id: str,
    rows: Mapping[str, Sequence[str]],
    state: Literal["active", "retired"] = "active",
) -> Path:
    """Write a native manifest atomically (temporary file, fsync, rename); returns its path."""
    target = Path(path)
    text = json.dumps(manifest_document(manifest_id, rows, state))
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
