"""Which NeMo RL recovery points a sweep reads, point by point as NeMo's own restore treats them: a step
or snapshot directory that is not there (a dangling link to an unmounted volume, a link loop) fails
closed naming it; snapshots NeMo passes over protect nothing, one it would refuse fails closed; the
August branch's schema-1 snapshots (COMMITTED, LATEST) read; the generator's every layout read exactly
as the oracle of NeMo's restore reads it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tq_gc.config import ManifestSource
from tq_gc.errors import CheckpointInProgress, ReferenceSourceError
from tq_gc.references.manifests import ManifestsSource
from tq_gc.rows import RowId, rows_of

from support.nemo_rl_checkpoints import main as generate
from support.nemo_rl_checkpoints import snapshot_dir, write_checkpoint, write_snapshot
from support.nemo_rl_data_plane import (
    STAGING,
)
from support.nemo_rl_ledgers import (
    inventory,
)
from support.nemo_rl_oracle import restore_keeps
from support.nemo_rl_reading import staging


def nemo_source(ckpt: Path) -> ManifestSource:
    return ManifestSource(glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery")


def read(ckpt: Path) -> set[RowId]:
    return rows_of(ManifestsSource([nemo_source(ckpt)]).read())


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


# -- which snapshots NeMo's restore starts from ---------------------------------------------------------


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


GYM_PARTICIPANT = {
    "participant": {"server_name": "p", "component": "responses_api_models", "participant_name": "p"},
    "payload": {},
    "manifest": {"relative_path": "gym/p/manifest.json", "manifest_digest": "0" * 64},
}


@pytest.mark.parametrize(
    "gym_checkpoint",
    [
        [],
        "checkpoint-1",
        {"participants": []},
        {"checkpoint_id": 7, "participants": []},
        {"checkpoint_id": "c1", "participants": {}},
        {"checkpoint_id": "c1", "participants": ["p"]},
        {"checkpoint_id": "c1", "participants": [{**GYM_PARTICIPANT, "participant": None}]},
        {"checkpoint_id": "c1", "participants": [{**GYM_PARTICIPANT, "payload": []}]},
        {"checkpoint_id": "c1", "participants": [{**GYM_PARTICIPANT, "manifest": {"relative_path": "m"}}]},
        {"checkpoint_id": "c1", "participants": [{**GYM_PARTICIPANT, "manifest": {"manifest_digest": "0"}}]},
    ],
    ids=[
        "a-list",
        "a-string",
        "no-checkpoint-id",
        "checkpoint-id-not-a-string",
        "participants-not-a-list",
        "participant-not-an-object",
        "no-identity",
        "payload-not-an-object",
        "no-manifest-digest",
        "no-manifest-path",
    ],
)
def test_a_gym_checkpoint_nemos_model_rejects_is_passed_over(ckpt: Path, gym_checkpoint: Any) -> None:
    """NeMo validates `gym_checkpoint` with its pydantic model in `from_mapping`, and passes over a
    snapshot it rejects: the sweep completes, restoring as NeMo from the older snapshot."""
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    write_snapshot(ckpt / "step_3", 1, ["snap/1"])
    write_snapshot(
        ckpt / "step_3", 2, ["snap/2"], gym_checkpoint=gym_checkpoint, gym_topology_fingerprint="a" * 64
    )
    assert read(ckpt) == staging("step/0", "snap/1") == staging(*restore_keeps(ckpt))


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


@pytest.mark.parametrize("cut_short_after", ["COMMITTED", "manifest.json"])
def test_an_august_anchor_left_only_with_snapshots_cut_mid_delete_restores_from_the_step(
    ckpt: Path, cut_short_after: str
) -> None:
    """A plain delete cut short leaves a snapshot without its COMMITTED file, maybe without its manifest:
    the August restore skips it silently and, finding no other, restores from the step itself."""
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    pruned = write_snapshot(ckpt / "step_3", 1, ["snap/1"], schema_version=1)
    for name in ("COMMITTED", "manifest.json")[: ("COMMITTED", "manifest.json").index(cut_short_after) + 1]:
        (pruned / name).unlink()
    assert read(ckpt) == staging("step/0") == staging(*restore_keeps(ckpt))


def test_a_newer_snapshot_without_its_manifest_alone_fails_closed_as_its_restore_stops(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    (write_snapshot(ckpt / "step_3", 1, ["snap/1"]) / "manifest.json").unlink()  # no LATEST: not August
    with pytest.raises(ReferenceSourceError, match=r"passes over every committed rollout snapshot"):
        read(ckpt)


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


def test_a_checkpoint_volume_without_its_marker_fails_closed(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": ["s/1"]}))
    source = ManifestSource(
        glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery", marker=".volume-ok"
    )
    with pytest.raises(ReferenceSourceError, match=r"marker '\.volume-ok' is missing"):
        ManifestsSource([source]).read()
    (ckpt / ".volume-ok").write_text("")
    assert rows_of(ManifestsSource([source]).read()) == staging("s/1")
