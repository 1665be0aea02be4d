"""A manifest whose bytes are unchanged is not parsed again: the source keeps each file's rows by the
digest of what it read, and gives exactly what a fresh parse of the same files would."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tq_gc.config import ManifestSource
from tq_gc.errors import ReferenceSourceError
from tq_gc.publish.manifest import NATIVE_FORMAT
from tq_gc.references import nemo_rl
from tq_gc.references.manifests import READERS, ManifestsSource
from tq_gc.references.manifests.text import TextFormatReader
from tq_gc.rows import KeysByPartition, RowId

from support.nemo_rl_checkpoints import write_checkpoint
from support.nemo_rl_ledgers import inventory

STAGING = "rollout_staging"


def native(*keys: str, state: str = "active") -> str:
    document = {
        "format": NATIVE_FORMAT,
        "manifest_id": "ckpt-1",
        "state": state,
        "rows": {STAGING: list(keys)},
    }
    return json.dumps(document)


def lineage(*keys: str) -> str:
    return "".join(json.dumps({"staging_key": key}) + "\n" for key in keys)


def sources(root: Path) -> list[ManifestSource]:
    return [
        ManifestSource(glob=f"{root}/native/*.json"),
        ManifestSource(
            glob=f"{root}/lineage/*.jsonl", format="jsonl", key_path="staging_key", partition=STAGING
        ),
    ]


def rewrite_keeping_times(path: Path, content: str) -> None:
    """New bytes under the same size, mtime and atime: what a stat-based cache could not tell apart."""
    before = path.stat()
    path.write_text(content)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each file the manifest parsers parse, in order."""
    seen: list[str] = []

    def counted(parse: Callable[..., Any]) -> Callable[..., Any]:
        def parse_counted(stream: Any, path: Path, source: ManifestSource) -> Any:
            seen.append(path.name)
            return parse(stream, path, source)

        return parse_counted

    for reader in READERS.values():
        if isinstance(reader, TextFormatReader):
            monkeypatch.setattr(reader, "parse_text", counted(reader.parse_text))
    restore_rows = nemo_rl.restore_rows

    def restore_rows_counted(point: nemo_rl.PointFiles, partition: str) -> list[RowId]:
        seen.append("rollout_recovery.pt")
        return restore_rows(point, partition)

    monkeypatch.setattr(nemo_rl, "restore_rows", restore_rows_counted)
    return seen


def test_a_manifest_whose_bytes_are_unchanged_is_not_parsed_again(tmp_path: Path, parses: list[str]) -> None:
    (tmp_path / "native").mkdir()
    (tmp_path / "lineage").mkdir()
    (tmp_path / "native" / "a.json").write_text(native("a1", "a2"))
    (tmp_path / "native" / "b.json").write_text(native("b1"))
    (tmp_path / "lineage" / "c.jsonl").write_text(lineage("c1"))
    source = ManifestsSource(sources(tmp_path))

    first = source.read()
    assert sorted(parses) == ["a.json", "b.json", "c.jsonl"]
    parses.clear()
    assert source.read() == first
    assert parses == []

    (tmp_path / "native" / "b.json").write_text(native("b1", "b2"))
    assert source.read()[STAGING] == {"a1", "a2", "b1", "b2", "c1"}
    assert parses == ["b.json"]


def test_a_manifest_rewritten_with_the_same_size_and_times_is_read_afresh(tmp_path: Path) -> None:
    (tmp_path / "native").mkdir()
    (tmp_path / "lineage").mkdir()
    path = tmp_path / "native" / "a.json"
    path.write_text(native("key-1"))
    source = ManifestsSource(sources(tmp_path))
    assert source.read()[STAGING] == {"key-1"}

    rewrite_keeping_times(path, native("key-2"))
    assert source.read()[STAGING] == {"key-2"}


def test_a_recovery_inventory_is_parsed_again_when_its_metadata_changes(
    tmp_path: Path, parses: list[str]
) -> None:
    step = tmp_path / "ckpt" / "step_3"
    write_checkpoint(step, inventory({"g1": ["k1"]}))
    source = ManifestsSource(
        [ManifestSource(glob=f"{tmp_path}/ckpt/**/rollout_recovery.pt", format="nemo_rl_recovery")]
    )
    assert source.read() == {STAGING: frozenset({"k1"})}
    assert source.read() == {STAGING: frozenset({"k1"})}
    assert parses == ["rollout_recovery.pt"]

    (step / "data_plane" / "metadata.json").write_text(json.dumps({"format_version": 1, "user_metadata": {}}))
    assert source.read() == {STAGING: frozenset({"k1"})}
    assert parses == ["rollout_recovery.pt", "rollout_recovery.pt"]


# ---- the property: a reader that keeps what it parsed reads what a fresh reader reads -------------

FILES = ("native/a.json", "native/b.json", "lineage/c.jsonl")
KEYS = st.lists(st.sampled_from(["k1", "k2", "k3", "k4"]), max_size=3)
NATIVE_CONTENTS = st.one_of(
    KEYS.map(lambda keys: native(*keys)),
    KEYS.map(lambda keys: native(*keys, state="retired")),
    st.just("{not json"),
    st.just(json.dumps({"format": "another/v1"})),
)
LINEAGE_CONTENTS = st.one_of(KEYS.map(lambda keys: lineage(*keys)), st.just('{"staging_key": 7}\n'))

WRITE = st.tuples(st.just("write"), st.sampled_from(FILES), st.data(), st.booleans())
STEPS = st.lists(
    st.one_of(WRITE, st.tuples(st.just("delete"), st.sampled_from(FILES)), st.tuples(st.just("read"))),
    max_size=14,
)


def outcome(source: ManifestsSource) -> KeysByPartition | str:
    try:
        return source.read()
    except ReferenceSourceError as exc:
        return f"error: {exc}"


@given(steps=STEPS, data=st.data())
def test_a_reader_keeping_what_it_parsed_reads_what_a_fresh_reader_reads(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    root = tmp_path_factory.mktemp("manifests")
    for directory in ("native", "lineage"):
        (root / directory).mkdir()
    keeping = ManifestsSource(sources(root))
    for step in steps:
        if step[0] == "write":
            name, keep_times = step[1], step[3]
            content = data.draw(LINEAGE_CONTENTS if name.endswith(".jsonl") else NATIVE_CONTENTS)
            path = root / name
            if keep_times and path.exists():
                rewrite_keeping_times(path, content)
            else:
                path.write_text(content)
        elif step[0] == "delete":
            (root / step[1]).unlink(missing_ok=True)
        assert outcome(keeping) == outcome(ManifestsSource(sources(root)))
