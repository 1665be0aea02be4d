"""Which NeMo RL recovery points a sweep reads, point by point as NeMo's own restore treats them: a step
or snapshot directory that is not there (a dangling link to an unmounted volume, a link loop) fails
closed naming it; snapshots NeMo passes over protect nothing, one it would refuse fails closed; the
August branch's schema-1 snapshots (COMMITTED, LATEST) and both ledger schema 4 layouts read."""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tq_gc.config import ManifestSource
from tq_gc.errors import ReferenceSourceError
from tq_gc.references.manifests import ManifestsSource
from tq_gc.rows import RowId, rows_of

from support.nemo_rl_checkpoints import RunsCode, snapshot_dir, write_checkpoint, write_point
from support.nemo_rl_data_plane import CANONICAL, STAGING, nemo_modules
from support.nemo_rl_ledgers import inventory, ledger_v3
from support.nemo_rl_snapshots import replay_index


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


# -- objects in fields that name no rows -------------------------------------------------------------------

HISTOGRAM_MODULE = "wandb.sdk.data_types.histogram"


class Histogram:
    """A stand-in for wandb's `Histogram` (wandb is not installed), pickled under wandb's own module path,
    as NeMo's finalizer writes it into the replay index's `extra_info["rollout_metrics"]`."""

    def __init__(self, sequence: list[float]) -> None:
        self.histogram = [len(sequence)]
        self.bins = [min(sequence), max(sequence)]
        self._log_type = "histogram"


Histogram.__module__ = HISTOGRAM_MODULE


class WritesOnBuild:
    """A class whose own `__setstate__` would create `marker`: a loader that builds it runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).mkdir()


WritesOnBuild.__module__ = "nemo_rl_test_evil"


@contextlib.contextmanager
def importable(module_name: str, **classes: Any) -> Iterator[None]:
    """`module_name` importable (holding `classes`) while inside: pickle finds a class by module and name."""
    parts = module_name.split(".")
    names = [".".join(parts[: depth + 1]) for depth in range(len(parts))]
    assert not any(name in sys.modules for name in names), "a real module of that name is loaded"
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    for name, value in classes.items():
        setattr(sys.modules[module_name], name, value)
    try:
        yield
    finally:
        for name in names:
            del sys.modules[name]


def replay_with(metrics: Any = None, tag: Any = None) -> dict[str, Any]:
    index = replay_index({"g5": ["route/5a"]})
    meta = index["groups"][0]["meta"]
    if metrics is not None:
        meta.extra_info["rollout_metrics"] = metrics
    if tag is not None:
        meta.tags.append(tag)
    return index


def write_replay_point(step: Path, index: dict[str, Any]) -> None:
    """A checkpoint whose replay index holds `index`, written by torch.save with wandb's module path
    importable (as in NeMo's process)."""
    with importable(HISTOGRAM_MODULE, Histogram=Histogram):
        write_point(step, ledger_v3([]), replay=index)


def test_a_wandb_histogram_in_the_replay_indexs_rollout_metrics_is_inert_and_the_sweep_reads(
    ckpt: Path,
) -> None:
    index = replay_with(metrics={"reward": Histogram([0.0, 1.0]), "turns": 3})
    write_replay_point(ckpt / "step_3", index)
    assert read(ckpt) == staging("route/5a") | {RowId(CANONICAL, "g5_g0")}


@pytest.mark.parametrize("where", ["tag", "sample_ids", "meta", "cleanup_staging_keys"])
def test_the_same_object_where_keys_are_read_fails_closed_naming_it(ckpt: Path, where: str) -> None:
    histogram = Histogram([0.0, 1.0])
    index = replay_with(tag=histogram if where == "tag" else None)
    meta = index["groups"][0]["meta"]
    if where == "sample_ids":
        meta.sample_ids = histogram
    elif where == "meta":
        index["groups"][0]["meta"] = histogram
    elif where == "cleanup_staging_keys":
        meta.tags[0]["route_assembly_plan"]["cleanup_staging_keys"] = histogram
    write_replay_point(ckpt / "step_3", index)
    with pytest.raises(ReferenceSourceError, match=r"wandb\.sdk\.data_types\.histogram\.Histogram"):
        read(ckpt)


@pytest.mark.parametrize("runs", ["reduce", "build"])
def test_an_unknown_class_that_would_run_code_on_load_runs_nothing(
    ckpt: Path, tmp_path: Path, runs: str
) -> None:
    marker = tmp_path / "code-ran"
    evil = RunsCode(marker) if runs == "reduce" else WritesOnBuild(marker)
    index = replay_with(metrics={"reward": evil})
    with importable("nemo_rl_test_evil", WritesOnBuild=WritesOnBuild):
        write_replay_point(ckpt / "step_3", index)
        assert read(ckpt) == staging("route/5a") | {RowId(CANONICAL, "g5_g0")}
        assert not marker.exists()
        with nemo_modules():
            torch.load(ckpt / "step_3" / "replay_buffer_metadata.pt", weights_only=False)
        assert marker.is_dir()  # the same file unpickled in full runs the code


def test_the_key_cap_holds_through_inert_objects(ckpt: Path) -> None:
    index = replay_with(metrics={"reward": Histogram([0.0])})
    meta = index["groups"][0]["meta"]
    keys = ["k"] * 1000
    meta.tags[0]["route_assembly_plan"]["cleanup_staging_keys"] = keys
    index["groups"] = index["groups"] * 5000  # 5M keys through shared references, in a small file
    write_replay_point(ckpt / "step_3", index)
    with pytest.raises(ReferenceSourceError, match="names more than 4000000 staging keys"):
        read(ckpt)
