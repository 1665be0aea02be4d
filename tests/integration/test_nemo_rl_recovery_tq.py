"""NeMo RL's recovery points on a real TransferQueue, across a run: trainer checkpoints and periodic
rollout snapshots saved the way NeMo RL saves them (written into tmp_ directories, renamed when done,
older ones pruned: trash_ then removed, keep_top_k, the bootstrap lineage dropped at the first
checkpoint), with generation-cut rows in TQ's staging partition referenced by every mechanism a restore
keeps (sealed ledger attempts of schema 2 and 3, Gym storage references, generation-cut proofs,
route-plan cleanup keys) and orphans no point keeps.

After every sweep, no row that NeMo RL's restore from any committed point would keep is gone, checked
against an oracle written here from NeMo's rules (it loads the files in full with torch, as NeMo does,
and shares no code with the reader). Rows no point keeps are reclaimed after grace. Every adversarial
file aborts the sweep or skips it, deleting nothing. tq-gc sweeps in-process through its TransferQueue
row store, with deploy/examples/nemo_rl.yaml (its partition and checkpoint directory made the test's
own) and the state store on a manual clock.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.testbed.clock import ManualClock
from tq_gc.config import TransferQueueConfig, parse_config
from tq_gc.report import Cause, Outcome, SweepReport
from tq_gc.state.memory import MemoryState
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.sweep import Collector

from support.nemo_rl_checkpoints import (
    INVENTORY,
    REPLAY,
    RunsCode,
    snapshot_dir,
    write_point,
    write_truncated,
)
from support.nemo_rl_data_plane import (
    HISTOGRAM_MODULE,
    Histogram,
    cut_key,
    importable,
    saved,
    with_rollout_metrics,
)
from support.nemo_rl_ledgers import (
    attempt,
    attempt_v3,
    expanding_ledger,
    finalized_group,
    group,
    group_v3,
    inventory,
    ledger_v3,
    sibling_history_v3,
)
from support.nemo_rl_oracle import restore_keeps
from support.nemo_rl_snapshots import cut_proofs, gym_checkpoint, replay_index, snapshot_manifest

pytestmark = pytest.mark.ray

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "nemo_rl.yaml"
GRACE_S = 900  # the example's
PutRows = Any


# ---- NeMo RL's saves, and tq-gc ------------------------------------------------------------------------


def example_config(ray_address: str, staging: str, ckpt: Path) -> dict[str, Any]:
    """deploy/examples/nemo_rl.yaml, with this test's partition and checkpoint directory."""
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    [scope], [manifest] = values["scope"], values["manifests"]
    scope["partition"] = manifest["partition"] = staging
    manifest["glob"] = manifest["glob"].replace("/checkpoints/", f"{ckpt}/", 1)
    values.update(state_url="memory://", transfer_queue={"ray_address": ray_address})
    return values


class Job:
    """A NeMo RL job's checkpoint directory and staging partition, and tq-gc sweeping them. Every
    sweep checks the invariant: each row a restore from a committed point keeps is still in TQ."""

    def __init__(
        self, ray_address: str, store: TransferQueueRowStore, tq: Any, staging: str, ckpt: Path
    ) -> None:
        self.clock = ManualClock()
        self.state = MemoryState("nemo-job", clock_ms=self.clock)
        self.store, self.tq, self.staging, self.ckpt = store, tq, staging, ckpt
        self.config = parse_config(example_config(ray_address, staging, ckpt))
        assert self.config.grace_seconds == GRACE_S
        self.sweeps = 0

    def keys(self) -> set[str]:
        return set(self.tq.kv_list(self.staging).get(self.staging, {}))

    def sweep(self, execute: bool = True, oracle: bool = True) -> SweepReport:
        """One sweep; then the oracle's check, unless the files are adversarial (the oracle loads them
        in full, as NeMo does: it would run their code)."""
        report = Collector(self.config, self.state, self.store, holder="test").sweep(dry_run=not execute)
        self.sweeps += 1
        if not oracle:
            return report
        kept = restore_keeps(self.ckpt)
        assert kept <= self.keys(), f"sweep {self.sweeps} deleted rows a restore keeps: {kept - self.keys()}"
        return report

    def past_grace(self) -> SweepReport:
        """First sight, the grace passing under dry runs, then the deleting sweep."""
        self.sweep()
        for _ in range(2):
            self.clock.advance(GRACE_S * 0.55)
            assert self.sweep(execute=False).outcome is Outcome.DRY_RUN
        return self.sweep()

    def save(self, final: Path, write: Callable[[Path], None]) -> None:
        """A NeMo save: written into tmp_<name>, a sweep meanwhile skips and deletes nothing, renamed."""
        tmp = final.with_name(f"tmp_{final.name}")
        tmp.mkdir(parents=True)
        write(tmp)
        before = self.keys()
        self.clock.advance(GRACE_S * 2)  # even long past every grace
        skipped = self.sweep()
        assert (skipped.outcome, skipped.cause) == (Outcome.SKIPPED, Cause.CHECKPOINT_IN_PROGRESS)
        assert self.keys() == before
        tmp.rename(final)

    def prune_snapshots(self, anchor: Path, keep_latest_k: int) -> None:
        """commit_snapshot's retention: older snapshots renamed trash_ (a sweep then), then removed."""
        root = anchor / "rollout_snapshots"
        for stale in sorted(root.glob("snapshot_*"), reverse=True)[keep_latest_k:]:
            trash = stale.with_name(f"trash_{stale.name}")
            stale.rename(trash)
            self.sweep(execute=False)
            shutil.rmtree(trash)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    (tmp_path / "checkpoints").mkdir()
    return tmp_path / "checkpoints"


@pytest.fixture
def job(ray_cluster: Any, tq: Any, tq_partition: str, ckpt: Path) -> Iterator[Job]:
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
        yield Job(ray_cluster.address, store, tq, tq_partition, ckpt)


def cuts(checkpoint: str, rollout: str, chunks: int = 2) -> list[str]:
    return [cut_key(checkpoint, rollout, "call3", seq) for seq in range(chunks)]


def test_across_a_run_no_row_a_restore_keeps_is_deleted_and_the_rest_is_reclaimed(
    job: Job, put_rows: PutRows, ckpt: Path
) -> None:
    out_of_scope = ["g2_g1_a77c0/call4"]  # a model call's own staging row: not a cut row
    put_rows(job.staging, out_of_scope)

    # Bootstrap: a snapshot before the first trainer checkpoint (schema 5: Gym state and cut proofs).
    boot_gym, boot_proof, lost = cuts("boot", "r1"), cuts("boot", "r2"), cuts("boot", "forest", 3)
    put_rows(job.staging, boot_gym + boot_proof + lost)  # `lost`: forest-lane chunks no point names

    def bootstrap_snapshot(point: Path) -> None:
        gym = gym_checkpoint(point, {"token_capture_staging": boot_gym})
        manifest = snapshot_manifest(5, gym, cut_proofs("boot", {"r2": boot_proof}, failed=["r3"]))
        write_point(point, ledger_v3([]), manifest=manifest)

    job.save(snapshot_dir(ckpt / "bootstrap", 1), bootstrap_snapshot)
    report = job.past_grace()
    assert report.outcome is Outcome.COMPLETED and {row.key for row in report.deleted_sample} == set(lost)

    # step_1: a trainer checkpoint (schema 3 ledger, replay index with route plans); bootstrap pruned.
    sealed, route, abandoned = cuts("step_1", "g1_g0"), cuts("step_1", "route1"), cuts("step_1", "g1_g1-a0")
    put_rows(job.staging, sealed + route + abandoned)
    ledger1 = ledger_v3(
        [group_v3("g1", [[attempt_v3(0, "sealed", sealed, "g1_g0")], [attempt_v3(0, "abandoned")]])]
    )
    job.save(
        ckpt / "step_1",
        lambda point: write_point(point, ledger1, replay=replay_index({"g0": route}, job.staging)),
    )
    report = job.past_grace()
    # an abandoned attempt's rows, and the bootstrap snapshot's: NeMo restores from step_1 now
    assert {row.key for row in report.deleted_sample} == set(abandoned + boot_gym + boot_proof)
    shutil.rmtree(ckpt / "bootstrap" / "rollout_snapshots")  # prune_bootstrap_snapshots

    # step_1's periodic snapshots (schema 6: cuts in the Gym lineage), keep_latest_k=1.
    first, second = cuts("snap1", "g2_g0"), cuts("snap2", "g2_g0-a1")
    put_rows(job.staging, first)
    job.save(
        snapshot_dir(ckpt / "step_1", 1),
        lambda point: write_point(
            point,
            ledger_v3([group_v3("g2", [sibling_history_v3("g2", 0, first)])]),
            manifest=snapshot_manifest(
                6, gym_checkpoint(point, {"generation_prefix_cut": first}), base_train_step=1
            ),
        ),
    )
    put_rows(job.staging, second)
    job.save(
        snapshot_dir(ckpt / "step_1", 2),
        lambda point: write_point(
            point,
            ledger_v3([]),
            manifest=snapshot_manifest(
                6, gym_checkpoint(point, {"generation_prefix_cut": second}), base_train_step=1
            ),
        ),
    )
    job.prune_snapshots(ckpt / "step_1", keep_latest_k=1)
    report = job.past_grace()
    assert {row.key for row in report.deleted_sample} == set(first)

    # step_2: schema 2 (a finalized group, its canonical_meta a KVBatchMeta whose route plan keeps one of
    # its rows) keeping one of step_1's sealed rows; keep_top_k=1 prunes step_1 and its snapshots.
    finalized = cuts("step_2", "g3_g0")
    put_rows(job.staging, finalized)
    ledger2 = {
        "schema_version": 2,
        "groups": [
            finalized_group("g3", [finalized], route=finalized[:1], staging=job.staging),
            group("g1", [[attempt("sealed", sealed[:1], "g1_g0")], [attempt("dispatched")]]),
        ],
        "open_train_step": None,
    }
    job.save(ckpt / "step_2", lambda point: write_point(point, ledger2))
    shutil.rmtree(ckpt / "step_1")
    report = job.past_grace()

    assert report.outcome is Outcome.COMPLETED
    # g3 is published: of its staging rows only what its route plan names is kept (finalization clears
    # the rest); g1's sealed row is kept.
    assert restore_keeps(ckpt) == {finalized[0], sealed[0]}
    assert job.keys() == {finalized[0], sealed[0], *out_of_scope}  # everything else reclaimed after grace

    # step_2's periodic snapshots on the August layout (manifest schema 1, COMMITTED, LATEST, plain
    # delete), their replay index carrying wandb Histograms; the newest one's manifest torn.
    august = [cuts("aug1", "g4_g0"), cuts("aug2", "g4_g0-a1"), cuts("aug3", "g4_g0-a2")]
    for sequence, keys in enumerate(august, start=1):
        put_rows(job.staging, keys)
        job.save(snapshot_dir(ckpt / "step_2", sequence), august_snapshot(job, keys))
    shutil.rmtree(snapshot_dir(ckpt / "step_2", 1))  # keep_latest_k=2, by plain delete
    (snapshot_dir(ckpt / "step_2", 3) / "manifest.json").write_text('{"schema_version": 1')
    report = job.past_grace()
    assert report.outcome is Outcome.COMPLETED  # NeMo passes the torn one over and restores snapshot 2
    assert {row.key for row in report.deleted_sample} == set(august[0] + august[2])
    assert job.keys() == {finalized[0], sealed[0], *august[1], *out_of_scope}

    # step_3 on a volume that is not mounted: a dangling link. No sweep deletes until it is back.
    lost_later = cuts("step_2", "lost")
    put_rows(job.staging, lost_later)
    os.symlink(ckpt.parent / "unmounted" / "step_3", ckpt / "step_3")
    job.sweep(oracle=False)
    for _ in range(3):
        job.clock.advance(GRACE_S * 0.55)
        report = job.sweep(oracle=False)
        assert (report.outcome, report.cause, report.counts.deleted) == (
            Outcome.ABORTED,
            Cause.SOURCE_FAILED,
            0,
        )
        assert str(ckpt / "step_3") in (report.reason or "")
    assert set(lost_later) <= job.keys()
    os.unlink(ckpt / "step_3")
    report = job.past_grace()
    assert {row.key for row in report.deleted_sample} == set(lost_later)


def august_snapshot(job: Job, keys: list[str]) -> Callable[[Path], None]:
    """A snapshot as the August branch commits it: files, COMMITTED, rename (by job.save), LATEST."""

    def write(point: Path) -> None:
        manifest = {
            "schema_version": 1,
            "base_train_step": 2,
            "trainer_version": 2,
            "current_epoch": 0,
            "mutation_version": 3,
            "rolled_back_train_group_count": 0,
            "bootstrap_fingerprint": None,
        }
        with importable(HISTOGRAM_MODULE, Histogram=Histogram):
            write_point(
                point,
                {"schema_version": 2, "groups": [], "open_train_step": None},
                replay=with_rollout_metrics(replay_index({f"g-{point.name}": keys}, job.staging)),
                manifest=manifest,
            )
        (point / "COMMITTED").write_text("committed\n")
        (point.parent / "LATEST").write_text(point.name.removeprefix("tmp_") + "\n")

    return write


def foreign_receipt(step: Path) -> None:
    """A sealed receipt naming another attempt than its own: NeMo's loader refuses the ledger."""
    state = inventory({"g9": ["x"]})
    state["groups"][0]["siblings"][0]["attempts"][-1]["receipt"]["rollout_id"] = "g9_g0_a" + "0" * 32
    write_point(step, state)


def histogram_as_a_tag(step: Path) -> None:
    """A wandb Histogram where the replay index's keys are read (a tag, which may carry a route plan)."""
    index = replay_index({"g": ["x"]})
    assert index["groups"][0]["meta"].tags is not None
    index["groups"][0]["meta"].tags.append(Histogram([0.0]))
    with importable(HISTOGRAM_MODULE, Histogram=Histogram):
        write_point(step, ledger_v3([]), replay=index)


ADVERSARIAL: dict[str, tuple[Callable[[Path], None], Cause]] = {
    "another attempt's receipt": (foreign_receipt, Cause.SOURCE_FAILED),
    "histogram where keys are read": (histogram_as_a_tag, Cause.SOURCE_FAILED),
    "truncated ledger": (lambda step: write_truncated(step, inventory({"g9": ["x"]})), Cause.SOURCE_FAILED),
    "wrong digest": (lambda step: write_point(step, inventory({}), digest="0" * 64), Cause.SOURCE_FAILED),
    "advertised ledger missing": (
        lambda step: (write_point(step, inventory({})), (step / INVENTORY).unlink()),
        Cause.SOURCE_FAILED,
    ),
    "advertised replay index missing": (
        lambda step: (
            write_point(step, ledger_v3([]), replay=replay_index({"g": []})),
            (step / REPLAY).unlink(),
        ),
        Cause.SOURCE_FAILED,
    ),
    "expanding pickle": (lambda step: write_point(step, expanding_ledger()), Cause.SOURCE_FAILED),
    "code in the pickle": (
        lambda step: write_point(step, payload=saved({"schema_version": 3, "x": RunsCode(step / "ran")})),
        Cause.SOURCE_FAILED,
    ),
    "schema 4": (lambda step: write_point(step, inventory({}, schema_version=4)), Cause.SOURCE_FAILED),
    "snapshot without manifest": (
        lambda step: write_point(snapshot_dir(step.parent / "step_1", 1), ledger_v3([])),
        Cause.SOURCE_FAILED,
    ),
    "snapshot being written": (
        lambda step: snapshot_dir(write_point(step).parent, 4, "tmp_").mkdir(parents=True),
        Cause.CHECKPOINT_IN_PROGRESS,
    ),
    "ledger without its metadata": (
        lambda step: write_point(step, inventory({}), metadata=False),
        Cause.CHECKPOINT_IN_PROGRESS,
    ),
}


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_every_adversarial_file_fails_closed_or_skips_deleting_nothing(
    job: Job, put_rows: PutRows, ckpt: Path, case: str
) -> None:
    kept, orphan = cuts("step_1", "g1_g0"), cuts("step_0", "lost")
    put_rows(job.staging, kept + orphan)
    write_point(ckpt / "step_1", ledger_v3([group_v3("g1", [[attempt_v3(0, "sealed", kept, "g1_g0")]])]))
    job.sweep()
    for _ in range(2):
        job.clock.advance(GRACE_S * 0.55)
        job.sweep(execute=False)
    damage, cause = ADVERSARIAL[case]
    damage(ckpt / "step_2")
    report = job.sweep(oracle=False)
    expected = Outcome.SKIPPED if cause is Cause.CHECKPOINT_IN_PROGRESS else Outcome.ABORTED
    assert (report.outcome, report.cause, report.counts.deleted) == (expected, cause, 0)
    assert job.keys() == set(kept + orphan)
    assert not (ckpt / "step_2" / "ran").exists()
