from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tq_gc.config import ManifestSource
from tq_gc.errors import ConfigError, ReferenceSourceError
from tq_gc.model import RowId, rows_of
from tq_gc.references.base import ReferenceSource
from tq_gc.references.manifests import NATIVE_FORMAT, ManifestsSource, read_manifest

STAGING = "rollout_staging"
CUT = "__generation_cut__/ckpt-000123/r7_g0_a1/call3/0"
NATIVE = ManifestSource(glob="**/gc-manifest.json")
RECORDS = ManifestSource(
    glob="**/gym/model/*/records.jsonl",
    format="jsonl",
    key_path="continuation.staging_keys",
    partition=STAGING,
)
LINEAGE = ManifestSource(glob="lineage/*.jsonl", format="jsonl", key_path="staging_key", partition=STAGING)
SNAPSHOT = ManifestSource(
    glob="snapshots/*/manifest.json", format="json", key_path="rows.key", partition=STAGING
)


def native(state: str = "active", rows: Any = None, **extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"format": NATIVE_FORMAT, "manifest_id": "ckpt-000123", "state": state}
    document["rows"] = {STAGING: [CUT]} if rows is None else rows
    return document | extra


def write(path: Path, content: str | bytes | dict[str, Any] | list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def jsonl(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def rows(*keys: str, partition: str = STAGING) -> frozenset[RowId]:
    return frozenset(RowId(partition, key) for key in keys)


def test_is_a_reference_source(tmp_path: Path) -> None:
    source: ReferenceSource = ManifestsSource([NATIVE], root=tmp_path)
    assert source.name == "manifests"


@pytest.mark.parametrize(
    ("source", "files", "expected"),
    [
        (NATIVE, {"ckpt-1/gc-manifest.json": native()}, rows(CUT)),
        (NATIVE, {"ckpt-1/gc-manifest.json": native("retired")}, rows()),
        (NATIVE, {"ckpt-1/gc-manifest.json": native("retired") | {"rows": None}}, None),
        (
            NATIVE,
            {"gc-manifest.json": native(rows={STAGING: ["a", "b"], "other": ["c"]}, writer="trainer-0")},
            rows("a", "b") | rows("c", partition="other"),
        ),
        (NATIVE, {"gc-manifest.json": native(rows={})}, rows()),
        (
            RECORDS,
            {
                "step_10/gym/model/server-0/records.jsonl": jsonl(
                    {"rollout_id": "r1", "continuation": {"staging_keys": ["r1/c1", "r1/c2"]}},
                    {"rollout_id": "r2"},
                    {"rollout_id": "r3", "continuation": None},
                ),
                "step_10/gym/model/server-1/records.jsonl": "\n"
                + jsonl({"continuation": {"staging_keys": [CUT]}})
                + "   \n",
            },
            rows("r1/c1", "r1/c2", CUT),
        ),
        (
            LINEAGE,
            {"lineage/r1.jsonl": jsonl({"staging_key": "r1/c1"}, {"staging_key": "r1/c2"}, {"parent": None})},
            rows("r1/c1", "r1/c2"),
        ),
        (
            SNAPSHOT,
            {
                "snapshots/0007/manifest.json": {"rows": [{"key": "a"}, {"key": ["b", "c"]}]},
                "snapshots/0007/COMMITTED": "",
            },
            rows("a", "b", "c"),
        ),
        (NATIVE, {}, rows()),
        (RECORDS, {"step_10/gym/model/server-0/records.jsonl": ""}, rows()),
    ],
    ids=[
        "native-active",
        "native-retired",
        "native-retired-rows-null-fails",
        "native-partitions-and-extra-fields",
        "native-no-rows",
        "records-jsonl",
        "lineage-jsonl",
        "snapshot-json",
        "no-files",
        "empty-jsonl",
    ],
)
def test_reads_rows(
    tmp_path: Path, source: ManifestSource, files: dict[str, Any], expected: frozenset[RowId] | None
) -> None:
    for name, content in files.items():
        write(tmp_path / name, content)
    reader = ManifestsSource([source], root=tmp_path)
    if expected is None:
        with pytest.raises(ReferenceSourceError):
            reader.read()
    else:
        assert rows_of(reader.read()) == expected


def test_retired_manifest_may_omit_its_rows(tmp_path: Path) -> None:
    document = native("retired")
    del document["rows"]
    write(tmp_path / "gc-manifest.json", document)
    assert rows_of(ManifestsSource([NATIVE], root=tmp_path).read()) == rows()


def test_retiring_or_deleting_a_manifest_releases_its_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ckpt-1/gc-manifest.json", native())
    reader = ManifestsSource([NATIVE], root=tmp_path)
    assert rows_of(reader.read()) == rows(CUT)
    write(path, native("retired"))
    assert rows_of(reader.read()) == rows()
    write(path, native())
    assert rows_of(reader.read()) == rows(CUT)
    path.unlink()
    assert rows_of(reader.read()) == rows()


def test_a_file_deleted_after_the_glob_holds_no_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ckpt-1/gc-manifest.json", native())
    [matched] = ManifestsSource([NATIVE], root=tmp_path).files()
    assert matched.files == (path,)
    path.unlink()
    assert read_manifest(matched.files[0], NATIVE) == []


def test_a_checkpoint_dir_pruned_after_the_glob_holds_no_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ckpt-1/gc-manifest.json", native())
    path.unlink()
    path.parent.rmdir()
    assert read_manifest(path, NATIVE) == []


def test_double_star_globs_across_nested_checkpoint_dirs(tmp_path: Path) -> None:
    write(tmp_path / "gc-manifest.json", native(rows={STAGING: ["top"]}))
    write(tmp_path / "ckpt-1/gc-manifest.json", native(rows={STAGING: ["one"]}))
    write(tmp_path / "run/a/ckpt-2/gc-manifest.json", native(rows={STAGING: ["two"]}))
    write(tmp_path / "run/a/ckpt-2/deep/er/gc-manifest.json", native(rows={STAGING: ["three"]}))
    write(tmp_path / "run/a/ckpt-2/not-a-manifest.json", native(rows={STAGING: ["ignored"]}))
    reader = ManifestsSource([NATIVE], root=tmp_path)
    assert rows_of(reader.read()) == rows("top", "one", "two", "three")
    [matched] = reader.files()
    assert [path.relative_to(tmp_path).as_posix() for path in matched.files] == [
        "ckpt-1/gc-manifest.json",
        "gc-manifest.json",
        "run/a/ckpt-2/deep/er/gc-manifest.json",
        "run/a/ckpt-2/gc-manifest.json",
    ]


def test_records_jsonl_glob_across_steps_and_servers(tmp_path: Path) -> None:
    for step in ("step_10", "step_20"):
        for server in ("server-0", "server-1"):
            record = {"continuation": {"staging_keys": [f"{step}/{server}"]}}
            write(tmp_path / "ckpt" / step / "gym/model" / server / "records.jsonl", jsonl(record))
    source = RECORDS.model_copy(update={"glob": str(tmp_path / "ckpt/**/gym/model/*/records.jsonl")})
    assert rows_of(ManifestsSource([source]).read()) == rows(
        "step_10/server-0", "step_10/server-1", "step_20/server-0", "step_20/server-1"
    )


def test_absolute_globs_ignore_the_root_and_relative_ones_use_it(tmp_path: Path) -> None:
    write(tmp_path / "a/gc-manifest.json", native(rows={STAGING: ["a"]}))
    write(tmp_path / "b/gc-manifest.json", native(rows={STAGING: ["b"]}))
    absolute = ManifestSource(glob=str(tmp_path / "a/gc-manifest.json"))
    relative = ManifestSource(glob="gc-manifest.json")
    reader = ManifestsSource([absolute, relative], root=tmp_path / "b")
    assert rows_of(reader.read()) == rows("a", "b")


def test_a_root_holding_glob_characters_is_taken_literally(tmp_path: Path) -> None:
    root = tmp_path / "ckpt[1]*"
    write(root / "gc-manifest.json", native())
    write(tmp_path / "ckpt1x/gc-manifest.json", native(rows={STAGING: ["decoy"]}))
    assert rows_of(ManifestsSource([NATIVE], root=root).read()) == rows(CUT)


def test_sources_are_unioned(tmp_path: Path) -> None:
    write(tmp_path / "gc-manifest.json", native(rows={STAGING: ["a", "shared"]}))
    write(tmp_path / "lineage/r.jsonl", jsonl({"staging_key": "shared"}, {"staging_key": "b"}))
    assert rows_of(ManifestsSource([NATIVE, LINEAGE], root=tmp_path).read()) == rows("a", "b", "shared")


@pytest.mark.parametrize(
    ("source", "name", "content", "message"),
    [
        (NATIVE, "gc-manifest.json", '{"format": "tq-gc/manifest/v1", ', r"is not valid JSON"),
        (NATIVE, "gc-manifest.json", "", r"is not valid JSON \(Expecting value at line 1 column 1\)"),
        (
            NATIVE,
            "gc-manifest.json",
            native() | {"format": "tq-gc/manifest/v2"},
            r"format is 'tq-gc/manifest/v2'",
        ),
        (
            NATIVE,
            "gc-manifest.json",
            native() | {"format": None},
            r"format is None, expected 'tq-gc/manifest/v1'",
        ),
        (NATIVE, "gc-manifest.json", [native()], r"must hold a JSON object, not list"),
        (NATIVE, "gc-manifest.json", native() | {"manifest_id": 7}, r"manifest_id is 7, expected a string"),
        (
            NATIVE,
            "gc-manifest.json",
            native() | {"state": "committed"},
            r"state is 'committed', expected one of",
        ),
        (NATIVE, "gc-manifest.json", native(rows=[CUT]), r"rows must be an object"),
        (
            NATIVE,
            "gc-manifest.json",
            native(rows={STAGING: CUT}),
            r"rows\['rollout_staging'\] must be a list",
        ),
        (
            NATIVE,
            "gc-manifest.json",
            native(rows={STAGING: ["a", 3]}),
            r"rows\['rollout_staging'\]\[1\] is 3",
        ),
        (NATIVE, "gc-manifest.json", native("retired", rows={STAGING: [3]}), r"\[0\] is 3"),
        (NATIVE, "gc-manifest.json", b'{"k": "\xff"}', r"is not UTF-8 text"),
        (SNAPSHOT, "snapshots/1/manifest.json", "{oops", r"manifest\.json: is not valid JSON"),
        (SNAPSHOT, "snapshots/1/manifest.json", {"rows": {"key": 12}}, r"\$\.rows\.key is int 12"),
        (
            SNAPSHOT,
            "snapshots/1/manifest.json",
            {"rows": {"key": {"a": "b"}}},
            r"is an object, expected a key",
        ),
        (
            LINEAGE,
            "lineage/r.jsonl",
            '{"staging_key": "a"}\n{"staging_key": "b',
            r"r\.jsonl line 2: is not valid JSON",
        ),
        (
            LINEAGE,
            "lineage/r.jsonl",
            '{"staging_key": "a"}\n\n\n{"staging_key": 5}\n',
            r"line 4: \$\.staging_key is int",
        ),
        (LINEAGE, "lineage/r.jsonl", '{"staging_key": "a"}\n"just a string"\n', r"line 2: \$ is str"),
        (
            RECORDS,
            "x/gym/model/s/records.jsonl",
            '{"continuation": "r1/c1"}\n',
            r"line 1: \$\.continuation is str",
        ),
    ],
    ids=[
        "native-truncated",
        "native-empty-file",
        "native-wrong-format",
        "native-no-format",
        "native-not-an-object",
        "native-manifest-id-not-string",
        "native-unknown-state",
        "native-rows-not-object",
        "native-rows-not-list",
        "native-key-not-string",
        "native-retired-still-validated",
        "native-not-utf8",
        "json-unparsable",
        "json-number-key",
        "json-object-key",
        "jsonl-truncated-last-line",
        "jsonl-wrong-type-counts-blank-lines",
        "jsonl-string-record",
        "jsonl-continuation-not-object",
    ],
)
def test_malformed_manifests_fail_the_source_naming_the_file(
    tmp_path: Path, source: ManifestSource, name: str, content: Any, message: str
) -> None:
    path = write(tmp_path / name, content)
    write(tmp_path / "a-valid/gc-manifest.json", native())
    with pytest.raises(ReferenceSourceError, match=message) as caught:
        ManifestsSource([NATIVE, source], root=tmp_path).read()
    assert caught.value.source == "manifests"
    assert str(path) in caught.value.detail


def test_a_directory_matching_the_glob_fails(tmp_path: Path) -> None:
    (tmp_path / "ckpt-1/gc-manifest.json").mkdir(parents=True)
    with pytest.raises(ReferenceSourceError, match=r"gc-manifest\.json: cannot be read"):
        ManifestsSource([NATIVE], root=tmp_path).read()


def test_an_unreadable_file_fails(tmp_path: Path) -> None:
    # A symlink to itself: unreadable whoever we are (root reads files whatever their mode).
    (tmp_path / "gc-manifest.json").symlink_to("gc-manifest.json")
    with pytest.raises(ReferenceSourceError, match="cannot be read"):
        ManifestsSource([NATIVE], root=tmp_path).read()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, r"glob '\*\*/gc-manifest\.json' matched no files, but the source is expect_nonempty"),
        ({"gc-manifest.json": native("retired")}, r"matched 1 file\(s\) holding no rows"),
        ({"a/gc-manifest.json": native(rows={}), "b/gc-manifest.json": native("retired")}, r"matched 2 file"),
    ],
    ids=["no-files", "only-retired", "no-rows"],
)
def test_expect_nonempty_fails_when_nothing_is_referenced(
    tmp_path: Path, files: dict[str, Any], message: str
) -> None:
    for name, content in files.items():
        write(tmp_path / name, content)
    source = NATIVE.model_copy(update={"expect_nonempty": True})
    with pytest.raises(ReferenceSourceError, match=message):
        ManifestsSource([source], root=tmp_path).read()


def test_expect_nonempty_is_per_source(tmp_path: Path) -> None:
    write(tmp_path / "gc-manifest.json", native())
    empty_lineage = LINEAGE.model_copy(update={"expect_nonempty": True})
    with pytest.raises(ReferenceSourceError, match=r"lineage/\*\.jsonl"):
        ManifestsSource([NATIVE, empty_lineage], root=tmp_path).read()
    write(tmp_path / "lineage/r.jsonl", jsonl({"staging_key": "k"}))
    assert rows_of(ManifestsSource([NATIVE, empty_lineage], root=tmp_path).read()) == rows(CUT, "k")


def test_describe_reports_each_source_without_raising(tmp_path: Path) -> None:
    good = write(tmp_path / "ckpt-1/gc-manifest.json", native(rows={STAGING: ["a", "b"]}))
    bad = write(tmp_path / "lineage/r.jsonl", "{broken\n")
    empty = RECORDS.model_copy(update={"expect_nonempty": True})
    summaries = ManifestsSource([NATIVE, LINEAGE, empty], root=tmp_path).describe()
    assert [(s.glob, s.format, s.files, s.rows) for s in summaries] == [
        (NATIVE.glob, "native", (good,), 2),
        (LINEAGE.glob, "jsonl", (bad,), 0),
        (RECORDS.glob, "jsonl", (), 0),
    ]
    assert summaries[0].error is None
    assert summaries[1].error is not None and f"{bad} line 1: is not valid JSON" in summaries[1].error
    assert summaries[2].error is not None and "matched no files" in summaries[2].error


def test_a_key_path_with_an_empty_segment_is_a_config_error() -> None:
    source = ManifestSource(
        glob="x.jsonl", format="jsonl", key_path="continuation..staging_keys", partition=STAGING
    )
    with pytest.raises(ConfigError, match="empty segment"):
        ManifestsSource([source])
