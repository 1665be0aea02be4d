"""Which NeMo RL recovery points a sweep reads, point by point as NeMo's own restore treats them: a step
or snapshot directory that is not there (a dangling link to an unmounted volume, a link loop) fails
closed naming it; snapshots NeMo passes over protect nothing, one it would refuse fails closed; the
August branch's schema-1 snapshots (COMMITTED, LATEST) and both ledger schema 4 layouts read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tq_gc.config import ManifestSource
from tq_gc.errors import ReferenceSourceError
from tq_gc.references.manifests import ManifestsSource
from tq_gc.rows import RowId, rows_of

from support.nemo_rl_checkpoints import snapshot_dir, write_checkpoint
from support.nemo_rl_data_plane import STAGING
from support.nemo_rl_ledgers import inventory


def read(ckpt: Path) -> set[RowId]:
    source = ManifestSource(glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery")
    return rows_of(ManifestsSource([source]).read())


def staging(*keys: str) -> set[RowId]:
    return {RowId(STAGING, key) for key in keys}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    (tmp_path / "ckpt").mkdir()
    return tmp_path / "ckpt"


# -- points that are not there -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["step_9", "tmp_step_9", "bootstrap"])
def test_a_dangling_link_where_a_point_may_be_fails_closed_naming_it(
    ckpt: Path, tmp_path: Path, name: str
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    os.symlink(tmp_path / "unmounted" / name, ckpt / name)
    with pytest.raises(ReferenceSourceError, match=f"{ckpt / name}.*dangling symlink"):
        read(ckpt)


def test_a_dangling_snapshot_link_fails_closed_naming_it(ckpt: Path, tmp_path: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    link = snapshot_dir(ckpt / "step_3", 2)
    link.parent.mkdir(parents=True)
    os.symlink(tmp_path / "unmounted", link)
    with pytest.raises(ReferenceSourceError, match=f"{link}.*dangling symlink"):
        read(ckpt)


def test_a_link_loop_where_a_point_may_be_fails_closed_naming_it(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    os.symlink(ckpt / "step_9", ckpt / "step_9")
    with pytest.raises(ReferenceSourceError, match=f"{ckpt / 'step_9'}.*ELOOP"):
        read(ckpt)


def test_a_linked_step_on_a_mounted_volume_reads(ckpt: Path, tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "volume" / "step_3", inventory({"g1": ["s/1"]}))
    os.symlink(tmp_path / "volume" / "step_3", ckpt / "step_3")
    assert read(ckpt) == staging("s/1")


def test_other_dangling_links_are_not_points_and_do_not_matter(ckpt: Path, tmp_path: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    os.symlink(tmp_path / "gone", ckpt / "latest_weights")
    assert read(ckpt) == staging("s/1")

