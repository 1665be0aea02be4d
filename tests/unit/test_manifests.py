from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from tq_gc.config import ManifestSource, parse_config
from tq_gc.errors import ConfigError, ReferenceSourceError
from tq_gc.publish.manifest import NATIVE_FORMAT, write_manifest
from tq_gc.references.manifests import ManifestsSource, read_manifest
from tq_gc.rows import RowId, rows_of

STAGING = "rollout_staging"
CUT = "__generation_cut__/ckpt-000123/r7_g0_a1/call3/0"


@dataclass(frozen=True)
class Spec:
    """A manifest source with its glob relative to a test's directory (the config refuses relative globs)."""

    glob: str
    format: Literal["native", "json", "jsonl"] = "native"
    key_path: str | None = None
    partition: str | None = None

    def at(self, root: Path, **update: Any) -> ManifestSource:
        fields = {"format": self.format, "key_path": self.key_path, "partition": self.partition} | update
        return ManifestSource(glob=f"{root}/{self.glob}", **fields)


NATIVE = Spec("**/gc-manifest.json")
RECORDS = Spec("**/gym/model/*/records.jsonl", "jsonl", "continuation.staging_keys", STAGING)
LINEAGE = Spec("lineage/*.jsonl", "jsonl", "staging_key", STAGING)
SNAPSHOT = Spec("snapshots/*/manifest.json", "json", "rows.key", STAGING)


def reader(root: Path, *specs: Spec) -> ManifestsSource:
    return ManifestsSource([spec.at(root) for spec in specs])


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
    source = reader(tmp_path, NATIVE)
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
    tmp_path: Path, source: Spec, files: dict[str, Any], expected: frozenset[RowId] | None
) -> None:
    for name, content in files.items():
        write(tmp_path / name, content)
    manifests = reader(tmp_path, source)
    if expected is None:
        with pytest.raises(ReferenceSourceError):
            manifests.read()
    else:
        assert rows_of(manifests.read()) == expected


def test_retired_manifest_may_omit_its_rows(tmp_path: Path) -> None:
    document = native("retired")
    del document["rows"]
    write(tmp_path / "gc-manifest.json", document)
    assert rows_of(reader(tmp_path, NATIVE).read()) == rows()


def test_retiring_or_deleting_a_manifest_releases_its_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ckpt-1/gc-manifest.json", native())
    manifests = reader(tmp_path, NATIVE)
    assert rows_of(manifests.read()) == rows(CUT)
    write(path, native("retired"))
    assert rows_of(manifests.read()) == rows()
    write(path, native())
    assert rows_of(manifests.read()) == rows(CUT)
    path.unlink()
    assert rows_of(manifests.read()) == rows()


def test_a_file_deleted_after_the_glob_holds_no_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ckpt-1/gc-manifest.json", native())
    [matched] = reader(tmp_path, NATIVE).files()
    assert matched.files == (path,)
    path.unlink()
    assert read_manifest(matched.files[0], NATIVE.at(tmp_path)) == []


def test_a_checkpoint_dir_pruned_after_the_glob_holds_no_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ckpt-1/gc-manifest.json", native())
    path.unlink()
    path.parent.rmdir()
    assert read_manifest(path, NATIVE.at(tmp_path)) == []


def test_double_star_globs_across_nested_checkpoint_dirs(tmp_path: Path) -> None:
    write(tmp_path / "gc-manifest.json", native(rows={STAGING: ["top"]}))
    write(tmp_path / "ckpt-1/gc-manifest.json", native(rows={STAGING: ["one"]}))
    write(tmp_path / "run/a/ckpt-2/gc-manifest.json", native(rows={STAGING: ["two"]}))
    write(tmp_path / "run/a/ckpt-2/deep/er/gc-manifest.json", native(rows={STAGING: ["three"]}))
    write(tmp_path / "run/a/ckpt-2/not-a-manifest.json", native(rows={STAGING: ["ignored"]}))
    manifests = reader(tmp_path, NATIVE)
    assert rows_of(manifests.read()) == rows("top", "one", "two", "three")
    [matched] = manifests.files()
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
    assert rows_of(reader(tmp_path / "ckpt", RECORDS).read()) == rows(
        "step_10/server-0", "step_10/server-1", "step_20/server-0", "step_20/server-1"
    )


def test_an_escaped_glob_character_is_taken_literally(tmp_path: Path) -> None:
    root = tmp_path / "ckpt[1]*"
    write(root / "gc-manifest.json", native())
    write(tmp_path / "ckpt1x/gc-manifest.json", native(rows={STAGING: ["decoy"]}))
    source = ManifestSource(glob=f"{glob.escape(str(root))}/gc-manifest.json")
    assert rows_of(ManifestsSource([source]).read()) == rows(CUT)


def test_sources_are_unioned(tmp_path: Path) -> None:
    write(tmp_path / "gc-manifest.json", native(rows={STAGING: ["a", "shared"]}))
    write(tmp_path / "lineage/r.jsonl", jsonl({"staging_key": "shared"}, {"staging_key": "b"}))
    assert rows_of(reader(tmp_path, NATIVE, LINEAGE).read()) == rows("a", "b", "shared")


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
    tmp_path: Path, source: Spec, name: str, content: Any, message: str
) -> None:
    path = write(tmp_path / name, content)
    write(tmp_path / "a-valid/gc-manifest.json", native())
    with pytest.raises(ReferenceSourceError, match=message) as caught:
        reader(tmp_path, NATIVE, source).read()
    assert caught.value.source == "manifests"
    assert str(path) in caught.value.detail


def test_an_unreadable_file_fails(tmp_path: Path) -> None:
    # A symlink to itself: unreadable whoever we are (root reads files whatever their mode).
    (tmp_path / "gc-manifest.json").symlink_to("gc-manifest.json")
    with pytest.raises(ReferenceSourceError, match="cannot be read"):
        reader(tmp_path, NATIVE).read()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, r"/\*\*/gc-manifest\.json' matched no files, but the source has when_empty: abort"),
        ({"gc-manifest.json": native("retired")}, r"matched 1 file\(s\) holding no rows"),
        ({"a/gc-manifest.json": native(rows={}), "b/gc-manifest.json": native("retired")}, r"matched 2 file"),
    ],
    ids=["no-files", "only-retired", "no-rows"],
)
def test_when_empty_abort_fails_when_nothing_is_referenced(
    tmp_path: Path, files: dict[str, Any], message: str
) -> None:
    for name, content in files.items():
        write(tmp_path / name, content)
    with pytest.raises(ReferenceSourceError, match=message):
        ManifestsSource([NATIVE.at(tmp_path, when_empty="abort")]).read()


def test_when_empty_is_per_source(tmp_path: Path) -> None:
    write(tmp_path / "gc-manifest.json", native())
    sources = [NATIVE.at(tmp_path), LINEAGE.at(tmp_path, when_empty="abort")]
    with pytest.raises(ReferenceSourceError, match=r"lineage/\*\.jsonl"):
        ManifestsSource(sources).read()
    write(tmp_path / "lineage/r.jsonl", jsonl({"staging_key": "k"}))
    assert rows_of(ManifestsSource(sources).read()) == rows(CUT, "k")


def test_describe_reports_each_source_without_raising(tmp_path: Path) -> None:
    good = write(tmp_path / "ckpt-1/gc-manifest.json", native(rows={STAGING: ["a", "b"]}))
    bad = write(tmp_path / "lineage/r.jsonl", "{broken\n")
    sources = [NATIVE.at(tmp_path), LINEAGE.at(tmp_path), RECORDS.at(tmp_path, when_empty="abort")]
    summaries = ManifestsSource(sources).describe()
    assert [(s.glob, s.format, s.files, s.rows) for s in summaries] == [
        (f"{tmp_path}/{NATIVE.glob}", "native", (good,), 2),
        (f"{tmp_path}/{LINEAGE.glob}", "jsonl", (bad,), 0),
        (f"{tmp_path}/{RECORDS.glob}", "jsonl", (), 0),
    ]
    assert summaries[0].error is None
    assert summaries[1].error is not None and f"{bad} line 1: is not valid JSON" in summaries[1].error
    assert summaries[2].error is not None and "matched no files" in summaries[2].error


def test_a_key_path_with_an_empty_segment_is_a_config_error() -> None:
    source = ManifestSource(
        glob="/ckpt/x.jsonl", format="jsonl", key_path="continuation..staging_keys", partition=STAGING
    )
    with pytest.raises(ConfigError, match="empty segment"):
        ManifestsSource([source])


# --- Fail closed and bounded -----------------------------------------------------------------------


def absolute(root: Path, pattern: str = "**/gc-manifest.json", **fields: Any) -> ManifestSource:
    return ManifestSource(glob=f"{root}/{pattern}", **fields)


def test_a_missing_base_directory_fails_naming_it(tmp_path: Path) -> None:
    # An unmounted checkpoint volume: the glob's literal prefix does not exist.
    base = tmp_path / "ckpt"
    with pytest.raises(ReferenceSourceError, match="is the checkpoint volume mounted") as caught:
        ManifestsSource([absolute(base)]).read()
    assert str(base) in caught.value.detail


def test_a_base_path_through_a_file_fails(tmp_path: Path) -> None:
    write(tmp_path / "ckpt", "not a directory")
    with pytest.raises(ReferenceSourceError, match=r"ckpt.*not a directory"):
        ManifestsSource([absolute(tmp_path / "ckpt")]).read()


def test_a_dangling_symlink_the_glob_matches_fails(tmp_path: Path) -> None:
    write(tmp_path / "ckpt-1/gc-manifest.json", native())
    (tmp_path / "ckpt-2").mkdir()
    (tmp_path / "ckpt-2/gc-manifest.json").symlink_to(tmp_path / "gone/gc-manifest.json")
    with pytest.raises(ReferenceSourceError, match=r"ckpt-2/gc-manifest\.json.*dangling symlink"):
        ManifestsSource([absolute(tmp_path)]).read()


def test_a_dangling_symlink_walked_by_double_star_fails(tmp_path: Path) -> None:
    # A mount point linked into the tree whose target is gone could hold manifests: fail, do not skip.
    write(tmp_path / "ckpt-1/gc-manifest.json", native())
    (tmp_path / "remote").symlink_to(tmp_path / "unmounted-volume")
    with pytest.raises(ReferenceSourceError, match=r"remote.*dangling symlink"):
        ManifestsSource([absolute(tmp_path)]).read()


def test_a_dangling_symlink_on_a_literal_part_of_the_glob_fails(tmp_path: Path) -> None:
    write(tmp_path / "ckpt-1/latest/gc-manifest.json", native())
    (tmp_path / "ckpt-2").mkdir()
    (tmp_path / "ckpt-2/latest").symlink_to(tmp_path / "ckpt-2/step-9")
    with pytest.raises(ReferenceSourceError, match=r"ckpt-2/latest: is a dangling symlink"):
        ManifestsSource([absolute(tmp_path, "*/latest/gc-manifest.json")]).read()


READ_AS_ANOTHER_PROCESS = """
import sys
from tq_gc.config import ManifestSource
from tq_gc.errors import ReferenceSourceError
from tq_gc.references.manifests import ManifestsSource
try:
    print("rows", sorted(ManifestsSource([ManifestSource(glob=sys.argv[1])]).read()))
except ReferenceSourceError as exc:
    print("failed", exc.detail)
"""


def without_file_permission_override() -> list[str]:
    """A command prefix under which chmod binds: root reads everything unless it drops these capabilities."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to make a directory unreadable")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]


def test_an_unreadable_directory_fails(tmp_path: Path) -> None:
    write(tmp_path / "ckpt-1/gc-manifest.json", native())
    locked = tmp_path / "ckpt-2"
    write(locked / "gc-manifest.json", native(rows={STAGING: ["locked"]}))
    locked.chmod(0)
    try:
        done = subprocess.run(
            [
                *without_file_permission_override(),
                sys.executable,
                "-c",
                READ_AS_ANOTHER_PROCESS,
                f"{tmp_path}/**/gc-manifest.json",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
    finally:
        locked.chmod(0o755)
    assert done.stdout.startswith("failed"), done.stdout
    assert str(locked) in done.stdout and "Permission denied" in done.stdout


@pytest.mark.timeout(30)
def test_symlink_loops_under_double_star_end_and_find_each_file_once(tmp_path: Path) -> None:
    real = write(tmp_path / "run/ckpt-1/gc-manifest.json", native())
    for name in ("loop-a", "loop-b", "loop-c"):
        (tmp_path / "run/ckpt-1" / name).symlink_to(tmp_path / "run")
    (tmp_path / "run/up").symlink_to(tmp_path)
    [matched] = ManifestsSource([absolute(tmp_path)]).files()
    assert matched.files == (real,)
    assert rows_of(ManifestsSource([absolute(tmp_path)]).read()) == rows(CUT)


def test_a_symlinked_checkpoint_directory_is_read(tmp_path: Path) -> None:
    write(tmp_path / "volume/ckpt-1/gc-manifest.json", native())
    (tmp_path / "run").mkdir()
    (tmp_path / "run/ckpt-1").symlink_to(tmp_path / "volume/ckpt-1")
    assert rows_of(ManifestsSource([absolute(tmp_path / "run")]).read()) == rows(CUT)


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_device(path: Path) -> None:
    path.symlink_to("/dev/null")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("make", [make_fifo, make_device], ids=["fifo", "device"])
def test_a_special_file_the_glob_matches_fails_without_being_opened(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    write(tmp_path / "ckpt-1/gc-manifest.json", native())
    (tmp_path / "ckpt-2").mkdir()
    make(tmp_path / "ckpt-2/gc-manifest.json")
    with pytest.raises(ReferenceSourceError, match=r"ckpt-2/gc-manifest\.json: is a .*, not a regular file"):
        ManifestsSource([absolute(tmp_path)]).read()


def test_a_directory_the_glob_matches_fails_as_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "ckpt-1/gc-manifest.json").mkdir(parents=True)
    with pytest.raises(ReferenceSourceError, match=r"gc-manifest\.json: is a directory, not a regular file"):
        ManifestsSource([absolute(tmp_path)]).read()


def test_a_file_over_the_default_size_cap_fails(tmp_path: Path) -> None:
    # Valid JSON (a manifest, then whitespace) one byte over 64 MiB.
    path = write(tmp_path / "gc-manifest.json", native())
    with path.open("a") as stream:
        stream.write(" " * (64 * 2**20 + 1 - path.stat().st_size))
    with pytest.raises(
        ReferenceSourceError, match=r"gc-manifest\.json: is 67108865 bytes, over the 67108864-byte limit"
    ):
        ManifestsSource([absolute(tmp_path)]).read()


DEEP = 100_000


@pytest.mark.parametrize(
    ("pattern", "content", "fields", "message"),
    [
        ("gc-manifest.json", "[" * DEEP, {}, r"gc-manifest\.json: is nested too deeply"),
        ("gc-manifest.json", '{"rows": ' * DEEP, {}, r"gc-manifest\.json: is nested too deeply"),
        (
            "r.jsonl",
            '{"staging_key": "a"}\n' + "[" * DEEP + "\n",
            {"format": "jsonl", "key_path": "staging_key", "partition": STAGING},
            r"r\.jsonl line 2: is nested too deeply",
        ),
        (
            "gc-manifest.json",
            '{"format": "tq-gc/manifest/v1", "manifest_id": ' + "9" * 5000 + "}",
            {},
            r"gc-manifest\.json: is not valid JSON \(Exceeds the limit",
        ),
    ],
    ids=["array-bomb", "object-bomb", "jsonl-line-bomb", "huge-integer"],
)
def test_json_that_breaks_the_parser_fails_the_source_naming_the_file(
    tmp_path: Path, pattern: str, content: str, fields: dict[str, Any], message: str
) -> None:
    write(tmp_path / pattern, content)
    with pytest.raises(ReferenceSourceError, match=message):
        ManifestsSource([absolute(tmp_path, pattern, **fields)]).read()


@pytest.mark.parametrize("pattern", ["ckpt/**/gc-manifest.json", "./gc-manifest.json", "~/ckpt/*.json"])
def test_a_relative_glob_is_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match=r"manifests\.0\.glob: .*use an absolute path"):
        parse_config({"manifests": [{"glob": pattern}]})


def test_describe_reports_a_walk_failure_per_source(tmp_path: Path) -> None:
    good = write(tmp_path / "mounted/ckpt-1/gc-manifest.json", native())
    summaries = ManifestsSource([absolute(tmp_path / "unmounted"), absolute(tmp_path / "mounted")]).describe()
    assert [(s.files, s.rows) for s in summaries] == [((), 0), ((good,), 1)]
    assert summaries[0].error is not None and "is the checkpoint volume mounted" in summaries[0].error
    assert summaries[1].error is None


@pytest.mark.parametrize("pattern", ["/ckpt/", "/ckpt/**", "/ckpt/**/", "/"])
def test_a_glob_naming_directories_is_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match=r"manifests\.0\.glob: .*end it with a file name pattern"):
        parse_config({"manifests": [{"glob": pattern}]})


def test_write_manifest_is_read_back_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "gc-manifest.json", "ckpt-7", {"rollout_staging": ["a", "b"]})
    assert read_manifest(path, ManifestSource(glob=str(tmp_path / "*.json"))) == [
        RowId("rollout_staging", "a"),
        RowId("rollout_staging", "b"),
    ]
    write_manifest(path, "ckpt-7", {"rollout_staging": ["a"]}, state="retired")
    assert read_manifest(path, ManifestSource(glob=str(tmp_path / "*.json"))) == []
    assert [p.name for p in tmp_path.iterdir()] == ["gc-manifest.json"]
    with pytest.raises(ValueError, match="state must be one of"):
        write_manifest(path, "ckpt-7", {}, state="gone")  # type: ignore[arg-type]
