"""Which NeMo RL recovery points a sweep reads, point by point as NeMo's own restore treats them: a step
or snapshot directory that is not there (a dangling link to an unmounted volume, a link loop) fails
closed naming it; snapshots NeMo passes over protect nothing, one it would refuse fails closed; the
August branch's schema-1 snapshots (COMMITTED, LATEST) and both ledger schema 4 layouts read."""

from __future__ import annotations

import collections
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

from tq_gc.config import ManifestSource
from tq_gc.errors import CheckpointInProgress, ReferenceSourceError
from tq_gc.references.manifests import ManifestsSource
from tq_gc.rows import RowId, rows_of

from support.nemo_rl_checkpoints import RunsCode, snapshot_dir, write_checkpoint, write_point
from support.nemo_rl_checkpoints import main as generate
from support.nemo_rl_data_plane import (
    CANONICAL,
    HISTOGRAM_MODULE,
    STAGING,
    Histogram,
    importable,
    nemo_modules,
)
from support.nemo_rl_ledgers import (
    attempt_v4,
    inventory,
    ledger_v3,
    ledger_v4,
    lineage_group_v4,
    prompt_group_v4,
)
from support.nemo_rl_oracle import restore_keeps
from support.nemo_rl_snapshots import replay_index, snapshot_manifest


def nemo_source(ckpt: Path) -> ManifestSource:
    return ManifestSource(glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery")


def read(ckpt: Path) -> set[RowId]:
    return rows_of(ManifestsSource([nemo_source(ckpt)]).read())


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


class WritesOnBuild:
    """A class whose own `__setstate__` would create `marker`: a loader that builds it runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).mkdir()


WritesOnBuild.__module__ = "nemo_rl_test_evil"


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


# -- which snapshots NeMo's restore starts from ---------------------------------------------------------


def write_snapshot(
    anchor: Path,
    sequence: int,
    keys: list[str],
    *,
    schema_version: int = 6,
    committed: bool = True,
    **manifest_fields: Any,
) -> Path:
    """A snapshot of `anchor` whose ledger keeps `keys`; schema 1 is the August layout (COMMITTED file
    written before the rename, then the LATEST pointer), 4-6 the newer one (no COMMITTED file)."""
    point = snapshot_dir(anchor, sequence)
    bootstrap = anchor.name == "bootstrap"
    manifest = snapshot_manifest(schema_version, None, (), base_train_step=0 if bootstrap else 3)
    if schema_version == 1:
        manifest = {name: manifest[name] for name in AUGUST_MANIFEST_FIELDS}
    manifest.update(manifest_fields)
    write_point(point, inventory({f"g{sequence}": keys}), manifest=manifest)
    if schema_version == 1 and committed:
        (point / "COMMITTED").write_text("committed\n")
        (point.parent / "LATEST").write_text(point.name + "\n")
    return point


AUGUST_MANIFEST_FIELDS = (
    "schema_version",
    "base_train_step",
    "trainer_version",
    "current_epoch",
    "mutation_version",
    "rolled_back_train_group_count",
    "bootstrap_fingerprint",
)


@pytest.mark.parametrize("schema_version", [1, 6])
def test_a_corrupt_newest_snapshot_is_passed_over_and_protects_nothing(
    ckpt: Path, schema_version: int
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    write_snapshot(ckpt / "step_3", 1, ["snap/1"], schema_version=schema_version)
    newest = write_snapshot(ckpt / "step_3", 2, ["snap/2"], schema_version=schema_version)
    assert read(ckpt) == staging("step/0", "snap/1", "snap/2")
    (newest / "manifest.json").write_text("{")  # a torn manifest: NeMo restores from snapshot 1
    assert read(ckpt) == staging("step/0", "snap/1")


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: (p / "manifest.json").unlink(),
        lambda p: (p / "manifest.json").write_text("[]"),
        lambda p: edit(p, base_train_step=2),
        lambda p: edit(p, trainer_version=-1),
        lambda p: edit(p, bootstrap_fingerprint="f" * 64),
        lambda p: edit(p, schema_version=3),
        lambda p: edit(p, sampler_dispatch_index=True),
    ],
    ids=["no-manifest", "not-an-object", "other-step", "negative", "foreign-fingerprint", "schema-3", "bool"],
)
def test_every_way_nemo_passes_a_snapshot_over_protects_nothing(ckpt: Path, damage: Any) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    write_snapshot(ckpt / "step_3", 1, ["snap/1"])
    damage(write_snapshot(ckpt / "step_3", 2, ["snap/2"]))
    assert read(ckpt) == staging("step/0", "snap/1")


def edit(point: Path, **fields: Any) -> None:
    manifest = json.loads((point / "manifest.json").read_text())
    manifest.update(fields)
    (point / "manifest.json").write_text(json.dumps(manifest))


def test_a_step_whose_snapshots_nemo_would_all_pass_over_fails_closed_as_its_restore_stops(
    ckpt: Path,
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    (write_snapshot(ckpt / "step_3", 1, ["snap/1"]) / "manifest.json").write_text("{")
    with pytest.raises(
        ReferenceSourceError, match=r"passes over every committed rollout snapshot.*snapshot_000001"
    ):
        read(ckpt)


def test_a_snapshot_nemo_would_take_but_whose_ledger_it_refuses_fails_closed(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    write_snapshot(ckpt / "step_3", 1, ["snap/1"])
    newest = write_snapshot(ckpt / "step_3", 2, ["snap/2"])
    (newest / "rollout_recovery.pt").write_bytes(b"torn")
    with pytest.raises(ReferenceSourceError, match=r"snapshot_000002: rollout_recovery.pt: SHA-256"):
        read(ckpt)


def test_the_training_info_names_the_lineage_a_snapshot_must_belong_to(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    (ckpt / "step_3" / "training_info.json").write_text(json.dumps({"current_step": 3, "trainer_version": 5}))
    write_snapshot(ckpt / "step_3", 1, ["snap/1"], trainer_version=5)
    write_snapshot(ckpt / "step_3", 2, ["snap/2"], trainer_version=3)  # another lineage: passed over
    assert read(ckpt) == staging("step/0", "snap/1")


def test_august_snapshots_read_with_committed_and_latest_and_one_without_committed_is_skipped(
    ckpt: Path,
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    write_snapshot(ckpt / "step_3", 1, ["snap/1"], schema_version=1)
    write_snapshot(ckpt / "step_3", 2, ["snap/2"], schema_version=1)
    (ckpt / "step_3" / "rollout_snapshots" / "LATEST").write_text("snapshot_000001\n")  # never read back
    write_snapshot(ckpt / "step_3", 3, ["snap/3"], schema_version=1, committed=False)
    assert read(ckpt) == staging("step/0", "snap/1", "snap/2")


def test_an_august_snapshot_pruned_by_plain_delete_releases_its_rows(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    oldest = write_snapshot(ckpt / "step_3", 1, ["snap/1"], schema_version=1)
    write_snapshot(ckpt / "step_3", 2, ["snap/2"], schema_version=1)
    shutil.rmtree(oldest)
    assert read(ckpt) == staging("step/0", "snap/2")


def test_bootstrap_snapshots_protect_only_while_no_trainer_checkpoint_exists(ckpt: Path) -> None:
    bootstrap = ckpt / "bootstrap"
    bootstrap.mkdir()
    (bootstrap / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": 6,
                "base_train_step": 0,
                "trainer_version": 0,
                "bootstrap_fingerprint": "f" * 64,
            }
        )
    )
    write_snapshot(bootstrap, 1, ["boot/1"])
    write_snapshot(bootstrap, 2, ["boot/2"], bootstrap_fingerprint="e" * 64)  # another config's: passed over
    assert read(ckpt) == staging("boot/1")
    write_checkpoint(ckpt / "step_1", inventory({"g0": ["step/0"]}))
    assert read(ckpt) == staging("step/0")  # NeMo restores from step_1 now, never from bootstrap


def test_a_save_being_written_says_since_when(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    write_checkpoint(ckpt / "tmp_step_4", inventory({"g0": ["step/0"]}))
    os.utime(ckpt / "tmp_step_4", (1_000_000_000, 1_000_000_000))
    with pytest.raises(CheckpointInProgress) as caught:
        ManifestsSource([nemo_source(ckpt)]).read()
    assert caught.value.oldest() == (str(ckpt / "tmp_step_4"), 1_000_000_000)


def test_a_ledger_without_its_metadata_says_since_when(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}), metadata=False)
    os.utime(ckpt / "step_3", (1_000_000_000, 1_000_000_000))
    with pytest.raises(CheckpointInProgress) as caught:
        ManifestsSource([nemo_source(ckpt)]).read()
    assert caught.value.oldest() == (str(ckpt / "step_3"), 1_000_000_000)


# -- ledger schema 4: two layouts, told apart by shape ---------------------------------------------------


def test_a_schema_4_sibling_lineage_ledger_keeps_each_siblings_sealed_current_attempts_keys(
    ckpt: Path,
) -> None:
    groups = [
        lineage_group_v4(
            "g1",
            [
                [attempt_v4("failed"), attempt_v4("sealed", ["s/1a", "s/1b"], rollout_id="g1_g0")],
                [attempt_v4("sealed", ["s/old"], rollout_id="g1_g1"), attempt_v4("dispatched")],
                [attempt_v4("sealed")],  # sealed without a receipt (a terminal capture failure): no keys
            ],
        )
    ]
    write_checkpoint(ckpt / "step_3", ledger_v4(groups))
    assert read(ckpt) == staging("s/1a", "s/1b")


def test_a_schema_4_prompt_reference_ledger_names_no_staging_rows(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", ledger_v4([prompt_group_v4("g1"), prompt_group_v4("g2")]))
    assert read(ckpt) == set()


@pytest.mark.parametrize(
    "state, message",
    [
        (
            ledger_v4(
                [prompt_group_v4("g1"), lineage_group_v4("g2", [[attempt_v4("sealed", ["k"], "g2_g0")]])]
            ),
            "mixes",
        ),
        ({**ledger_v4([]), "open_train_step": None}, "open_train_step"),
        (ledger_v4([{**prompt_group_v4("g1"), "status": "generating"}]), "neither"),
        (
            ledger_v4([{**lineage_group_v4("g1", [[attempt_v4("dispatched")]]), "canonical_meta": None}]),
            "neither",
        ),
        (
            ledger_v4([lineage_group_v4("g1", [[{**attempt_v4("failed"), "staging_keys": ["k"]}]])]),
            "keeps staging",
        ),
        (ledger_v4([lineage_group_v4("g1", [[attempt_v4("finalized")]])]), "status is 'finalized'"),
    ],
    ids=[
        "mixed",
        "schema-2-field",
        "prompt-group-with-status",
        "lineage-group-with-meta",
        "unsealed-keys",
        "status",
    ],
)
def test_a_schema_4_ledger_of_neither_layout_or_one_nemo_refuses_fails_closed(
    ckpt: Path, state: Any, message: str
) -> None:
    write_checkpoint(ckpt / "step_3", state)
    with pytest.raises(ReferenceSourceError, match=message):
        read(ckpt)


# -- the generator's layouts, read by the reader and by the oracle -----------------------------------------

READABLE = ["schema2", "schema3", "schema4_lineage", "schema4_prompts", "august", "bootstrap"]
REFUSED = ["wrong_digest", "unknown_schema", "truncated", "expanding"]
SKIPPED = ["in_progress", "swapping", "snapshot_in_progress"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    generate(out)
    return out


@pytest.mark.parametrize("layout", READABLE)
def test_the_reader_keeps_exactly_what_the_oracle_of_nemos_restore_keeps(
    generated: Path, layout: str
) -> None:
    found = read(generated / layout)
    assert {row.key for row in found if row.partition == STAGING} == restore_keeps(generated / layout)
    assert found or layout == "schema4_prompts"  # the prompt-reference ledger names no rows


@pytest.mark.parametrize("layout", REFUSED)
def test_the_generators_refused_files_fail_the_source(generated: Path, layout: str) -> None:
    with pytest.raises(ReferenceSourceError):
        read(generated / layout)


@pytest.mark.parametrize("layout", SKIPPED)
def test_the_generators_saves_in_progress_skip(generated: Path, layout: str) -> None:
    with pytest.raises(CheckpointInProgress):
        read(generated / layout)


# -- a volume that is not mounted --------------------------------------------------------------------------


def test_a_checkpoint_volume_not_mounted_where_mount_point_says_fails_closed(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    source = ManifestSource(
        glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery", mount_point=str(ckpt)
    )
    with pytest.raises(ReferenceSourceError, match=f"{ckpt} is not a mount point"):
        ManifestsSource([source]).read()


def test_a_checkpoint_volume_without_its_marker_fails_closed(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    source = ManifestSource(
        glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery", marker=".volume-ok"
    )
    with pytest.raises(ReferenceSourceError, match=r"marker '\.volume-ok' is missing"):
        ManifestsSource([source]).read()
    (ckpt / ".volume-ok").write_text("")
    assert rows_of(ManifestsSource([source]).read()) == staging("s/1")


def test_metrics_of_any_python_shape_are_inert(ckpt: Path) -> None:
    """Telemetry as it comes: numpy arrays and scalars, a defaultdict and a Counter (pickled with items
    set on the object after it is made), a set, a tensor."""
    metrics = {
        "reward": Histogram([0.0, 1.0]),
        "lengths": numpy.arange(4, dtype=numpy.int64),
        "mean": numpy.float32(0.5),
        "by_task": collections.defaultdict(list, {"math": [1, 2]}),
        "stops": collections.Counter({"eos": 3}),
        "tags": {"a", "b"},
        "tensor": torch.ones(2),
    }
    write_replay_point(ckpt / "step_3", replay_with(metrics=metrics))
    assert read(ckpt) == staging("route/5a") | {RowId(CANONICAL, "g5_g0")}


# -- a sealed attempt's receipt must be its own, as NeMo's loaders check ------------------------------------


@pytest.mark.parametrize("schema", [2, 4])
def test_a_sealed_receipt_of_another_attempt_is_refused_as_nemo_refuses_it(ckpt: Path, schema: int) -> None:
    if schema == 2:
        state = inventory({"g1": ["s/1"]})
        sealed = state["groups"][0]["siblings"][0]["attempts"][-1]
    else:
        state = ledger_v4([lineage_group_v4("g1", [[attempt_v4("sealed", ["s/1"])]])])
        sealed = state["groups"][0]["siblings"][0]["attempts"][-1]
    write_checkpoint(ckpt / "step_3", state)
    assert read(ckpt) == staging("s/1")  # the generator writes the identity NeMo derives
    sealed["receipt"]["rollout_id"] = "g1_g0_a" + "0" * 32
    write_checkpoint(ckpt / "step_3", state)
    with pytest.raises(ReferenceSourceError, match="receipt is another attempt's"):
        read(ckpt)
