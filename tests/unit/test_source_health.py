"""What a healthy manifest source looks like: a marker file the volume carries.

An unmounted volume leaves its mount point behind, an empty directory that reads as "no manifests"; a
marker makes that a failure of the source (the sweep aborts, exit 4) instead."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tq_gc.config import ManifestSource
from tq_gc.errors import ConfigError, ReferenceSourceError
from tq_gc.publish.manifest import write_manifest
from tq_gc.references.manifests import ManifestsSource
from tq_gc.rows import RowId, rows_of

STAGING = "rollout_staging"
# A tmpfs this machine mounts for every process (checked below): a real mount point to write under.
SHM = Path("/dev/shm")


def source(root: Path, **options: Any) -> ManifestSource:
    return ManifestSource(glob=f"{root}/**/gc-manifest.json", **options)


def manifest(root: Path, *keys: str) -> Path:
    path = root / "ckpt-1" / "gc-manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_manifest(path, "ckpt-1", {STAGING: list(keys)})


def read(*sources: ManifestSource) -> set[RowId]:
    return rows_of(ManifestsSource(sources).read())


@pytest.fixture
def on_a_mount() -> Iterator[Path]:
    assert os.path.ismount(SHM), "this test needs /dev/shm to be a mount point"
    with tempfile.TemporaryDirectory(dir=SHM, prefix="tqgc-volume-") as volume:
        yield Path(volume)


def test_an_empty_mount_point_without_its_marker_fails_the_source(tmp_path: Path) -> None:
    with pytest.raises(ReferenceSourceError, match=r"marker .*\.tq-gc-volume.* is missing.*mounted"):
        read(source(tmp_path, marker=".tq-gc-volume"))


def test_a_volume_with_its_marker_reads_its_manifests(tmp_path: Path) -> None:
    (tmp_path / ".tq-gc-volume").touch()
    manifest(tmp_path, "r1/c1")
    assert read(source(tmp_path, marker=".tq-gc-volume")) == {RowId(STAGING, "r1/c1")}


def test_a_marker_in_a_subdirectory_and_one_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "volume-id").write_text("pvc-123")
    assert read(source(tmp_path, marker="meta/volume-id")) == set()
    with pytest.raises(ReferenceSourceError, match="is not a regular file"):
        read(source(tmp_path, marker="meta"))


def test_a_marker_on_a_mounted_volume_reads_and_names_the_mount_when_missing(on_a_mount: Path) -> None:
    manifest(on_a_mount, "r1/c1")
    with pytest.raises(ReferenceSourceError, match=rf"mounted at {SHM}\b"):
        read(source(on_a_mount, marker=".tq-gc-volume"))
    (on_a_mount / ".tq-gc-volume").touch()
    assert read(source(on_a_mount, marker=".tq-gc-volume")) == {RowId(STAGING, "r1/c1")}


def test_check_reports_a_missing_marker_as_a_failed_source(tmp_path: Path) -> None:
    [summary] = ManifestsSource([source(tmp_path, marker=".tq-gc-volume")]).describe()
    assert summary.error is not None and ".tq-gc-volume" in summary.error


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"marker": "/abs/marker"}, "relative"),
        ({"marker": "../outside"}, "relative"),
    ],
)
def test_health_options_that_cannot_hold_are_refused(
    tmp_path: Path, options: dict[str, Any], needle: str
) -> None:
    with pytest.raises((ConfigError, ValueError), match=needle):
        source(tmp_path, **options)
