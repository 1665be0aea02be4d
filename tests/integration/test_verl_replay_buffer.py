"""verl 0.9.1's own ReplayBuffer and padding on a real TransferQueue, swept with deploy/examples/verl.yaml.

A trainer in verl's fit order (tools/testbed/verl_job.py) samples with verl's real `ReplayBuffer.sample()`
(its kv_list polling, `_materialize_batch`'s clear of the prompt rows, `_clear_groups`' evictions) and pads
with verl's `upsample_batch_to_divisible_size`. tq-gc sweeps in-process through its TransferQueue row store
with the example config (partitions renamed for the test), on a manual clock: a step lasts several
graces without sleeping. The trainer's admissions go through tq_gc.integrations.verl's mixin into the state
store the collector reads (as the sidecar's memory registry does).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.testbed.clock import ManualClock
from tools.testbed.verl_job import VerlShapedTrainer, padding_keys
from tq_gc.cli.checks import run_checks
from tq_gc.config import Config, TransferQueueConfig, parse_config
from tq_gc.integrations.verl import TqGcTrainerMixin, wrap_registered_trainers
from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import Outcome, SweepReport, WarningKind
from tq_gc.state.memory import MemoryState
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.sweep import Collector
from tq_gc.wiring import Runtime

from support.ray_fixtures import fresh_partition

pytestmark = pytest.mark.ray

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verl.yaml"
GRACE_S = 900  # the example's
INTERVAL_S = 60  # the example's schedule
STEP_S = GRACE_S + 5 * INTERVAL_S  # a large model's step: longer than grace
TTL_S = 10 * STEP_S  # the trainer's admissions outlive the manual clock's jumps (GcClient renews them)


def example_config(ray_address: str, train: str, val: str, **limits: Any) -> Config:
    """deploy/examples/verl.yaml, with this test's partitions for `train` and `val` (and `limits`)."""
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    renamed = {"train": train, "val": val}
    for entry in values["scope"]:
        entry["partition"] = renamed[entry["partition"]]
    values["transfer_queue"] = {"ray_address": ray_address}
    values["limits"].update(limits)
    config = parse_config(values)
    assert (config.grace_seconds, config.schedule.interval_seconds) == (GRACE_S, INTERVAL_S)
    return config


@pytest.fixture
def val_partition(tq: Any) -> Iterator[str]:
    """A second fresh partition (verl's `val`), cleared afterwards."""
    with fresh_partition(tq, "tqgc-val") as partition:
        yield partition


class Sidecar:
    """The collector on a manual clock, sweeping (and deleting) on the example's schedule."""

    def __init__(self, config: Config, store: TransferQueueRowStore) -> None:
        self.clock = ManualClock()
        self.state = MemoryState("verl-job", clock_ms=self.clock)
        self.config = config
        self.store = store
        self.deleted: set[str] = set()

    def sweep(self) -> SweepReport:
        report = Collector(self.config, self.state, self.store, holder="test").sweep(dry_run=False)
        self.deleted |= {row.key for row in report.deleted_sample}
        return report

    def sweep_for(self, seconds: float) -> list[SweepReport]:
        """A sweep every interval for `seconds` of the store's clock."""
        reports = []
        for _ in range(int(seconds // INTERVAL_S)):
            self.clock.advance(INTERVAL_S)
            reports.append(self.sweep())
        return reports

    def client(self) -> GcClient:
        return GcClient(AdmissionRegistry(self.state), ttl_seconds=TTL_S)


@pytest.fixture
def sidecar(ray_cluster: Any, tq: Any, tq_partition: str, val_partition: str) -> Iterator[Sidecar]:
    config = example_config(ray_cluster.address, tq_partition, val_partition)
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
        yield Sidecar(config, store)


def gc_trainer(sidecar: Sidecar, tq: Any, train: str, val: str, tmp_path: Path) -> VerlShapedTrainer:
    """The trainer line of docs/integrations.md ("verl") on a registry of the verl-shaped trainer, the client
    overridden to reach this test's registry (the documented one goes through TQGC_CONFIG to the sidecar's:
    scripts/soak-verl)."""
    registry: dict[str, type] = {"colocate_async": VerlShapedTrainer}
    wrap_registered_trainers(registry)

    class Trainer(registry["colocate_async"]):  # type: ignore[misc,valid-type]
        def tq_gc_client(self) -> GcClient:
            return sidecar.client()

    trainer = Trainer(tq, train, val, tmp_path / "ckpt")
    assert isinstance(trainer, TqGcTrainerMixin)
    return trainer


def keys(tq: Any, partition: str) -> set[str]:
    return set(tq.kv_list(partition).get(partition, {}))


def missing_partitions(report: SweepReport) -> list[str]:
    """The scope partitions a sweep warned do not exist (each warning quotes its partition first)."""
    return [
        warning.message.split("'")[1]
        for warning in report.warnings
        if warning.kind is WarningKind.SCOPE_PARTITION_MISSING
    ]


def completed(reports: list[SweepReport]) -> bool:
    return bool(reports) and all(report.outcome is Outcome.COMPLETED for report in reports)


def test_a_step_and_a_validation_longer_than_grace_lose_no_trajectory_or_padding_row(
    tq: Any, tq_partition: str, val_partition: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    trainer = gc_trainer(sidecar, tq, tq_partition, val_partition, tmp_path)
    trainer.validate()  # val_before_train: creates `val`
    held: dict[str, list[str]] = {}

    def work(trainer: VerlShapedTrainer, batch: Any) -> None:
        held[batch.partition_id] = list(batch.keys)
        assert completed(sidecar.sweep_for(STEP_S))
        assert set(batch.keys) <= keys(tq, batch.partition_id)  # all still there for the update

    batch = trainer.step(work, validate=work)
    assert len(padding_keys(batch)) == 2  # 3 groups x 2 sessions, rounded up to a multiple of 4
    assert set(held) == {tq_partition, val_partition} and sidecar.deleted == set()
    # the step's clear happened; the next step releases its admissions, then samples its own batch
    trainer.step(work)
    assert sidecar.deleted == set()
    assert not set(batch.keys) & keys(tq, tq_partition)


def test_padding_rows_seen_before_their_admission_are_covered_by_grace(
    tq: Any, tq_partition: str, val_partition: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    """verl writes padding rows inside _balance_batch; the mixin admits them when it returns. A sweep in
    between sees them held by nothing: their grace starts, and the admission stops it."""
    seen_unheld: list[int] = []

    class Trainer(TqGcTrainerMixin, VerlShapedTrainer):
        def tq_gc_client(self) -> GcClient:
            return sidecar.client()

    class SweptMidPadding(VerlShapedTrainer):
        def _balance_batch(self, batch: Any, metrics: dict[str, Any] | None = None) -> Any:
            balanced = super()._balance_batch(batch, metrics)
            seen_unheld.append(sidecar.sweep().counts.within_grace)
            return balanced

    class GcSweptMidPadding(TqGcTrainerMixin, SweptMidPadding):
        tq_gc_client = Trainer.tq_gc_client

    trainer = GcSweptMidPadding(tq, tq_partition, val_partition, tmp_path / "ckpt")
    trainer.validate()

    def work(trainer: VerlShapedTrainer, batch: Any) -> None:
        assert completed(sidecar.sweep_for(STEP_S))

    batch = trainer.step(work)
    assert seen_unheld == [2] and len(padding_keys(batch)) == 2
    assert sidecar.deleted == set()


def test_the_batch_each_resume_restores_is_reclaimed_within_grace_and_two_intervals_prompts_kept(
    tq: Any, ray_cluster: Any, tq_partition: str, val_partition: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    trainer = gc_trainer(sidecar, tq, tq_partition, val_partition, tmp_path)
    trainer.validate()
    saved: list[Path] = []

    def prefetch_then_save(trainer: VerlShapedTrainer, batch: Any) -> None:
        # async modes: the next groups are in flight when the checkpoint is saved
        trainer.agent_loop.submit(tq_partition, 2, trainer.global_steps)  # pending
        [finished] = trainer.agent_loop.submit(tq_partition, 1, trainer.global_steps)
        trainer.agent_loop.run(tq_partition, finished, trainer.global_steps)
        saved.append(trainer._save_checkpoint())  # verl saves before the step's final clear

    batch = trainer.step(prefetch_then_save)
    leaked = set(batch.keys)
    assert len(padding_keys(batch)) == 2 and not leaked & keys(tq, tq_partition)
    trainer.on_train_end()  # the job stops; its admissions go

    # The resumed job: a new sidecar (memory:// state is the sidecar's), verl's load_checkpoint.
    resumed = Sidecar(sidecar.config, sidecar.store)
    trainer = gc_trainer(resumed, tq, tq_partition, val_partition, tmp_path)
    tq.load_checkpoint(str(saved[0]))
    restored = keys(tq, tq_partition)
    assert leaked <= restored
    prompts = {key for key in restored if "_" not in key}
    assert len(prompts) == 3  # 2 pending, 1 finished: verl re-issues or samples them

    swept_s = 0
    while leaked & keys(tq, tq_partition):
        assert swept_s < GRACE_S + 2 * INTERVAL_S, "the restored batch outlived grace + two intervals"
        assert completed(resumed.sweep_for(INTERVAL_S))
        swept_s += INTERVAL_S
    assert resumed.deleted == leaked  # trajectories and padding rows of the trained batch, nothing else
    assert prompts <= keys(tq, tq_partition)
    # the resumed job goes on: its own batch (the restored finished group among it) stays held
    trainer.batch_size = 2

    def work(trainer: VerlShapedTrainer, batch: Any) -> None:
        assert completed(resumed.sweep_for(STEP_S))
        assert set(batch.keys) <= keys(tq, tq_partition)

    trainer.step(work)
    assert resumed.deleted == leaked


def test_a_trainer_without_the_integration_loses_nothing(
    tq: Any, tq_partition: str, val_partition: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    trainer = VerlShapedTrainer(tq, tq_partition, val_partition, tmp_path / "ckpt")
    trainer.validate()
    checks = run_checks(sidecar.config, Runtime(sidecar.state, sidecar.store))
    [protection] = [check for check in checks if check["name"] == "verl in-flight protection"]

    def work(trainer: VerlShapedTrainer, batch: Any) -> None:
        reports = sidecar.sweep_for(STEP_S)
        assert reports and all(report.outcome is Outcome.ABORTED for report in reports)
        assert "expect_nonempty" in (reports[0].reason or "")
        assert set(batch.keys) <= keys(tq, tq_partition)

    trainer.step(work)
    assert sidecar.deleted == set()
    assert protection == {
        "name": "verl in-flight protection",
        "ok": True,
        "detail": "INACTIVE: no verl trainer integration is live; sweeps abort until a trainer runs it",
    }


def test_evicted_groups_leftovers_reclaimed_tag_only_prompt_rows_kept_while_verl_polls(
    tq: Any, tq_partition: str, val_partition: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    trainer = gc_trainer(sidecar, tq, tq_partition, val_partition, tmp_path)
    trainer.validate()
    loop = trainer.agent_loop
    [failed] = loop.submit(tq_partition, 1, 1)
    loop.run(tq_partition, failed, 1, status="failure")
    # verl's sample() polls kv_list until the step's groups finish, evicting the failed group
    # (_clear_groups: prompt row and trajectories in one clear); sweeps run meanwhile
    stop = threading.Event()
    polling: list[SweepReport] = []

    def sweep_while_polling() -> None:
        while not stop.is_set():
            polling.append(sidecar.sweep())
            stop.wait(0.2)

    sweeper = threading.Thread(target=sweep_while_polling, daemon=True)
    sweeper.start()
    try:
        # the rollouts finish once two sweeps completed while verl polled (how long that takes is the
        # machine's business)
        batch = trainer.step(rollout_until=lambda: len(polling) >= 2)
    finally:
        stop.set()
        sweeper.join(30)
    assert completed(polling) and len(polling) >= 2
    assert not {key for key in keys(tq, tq_partition) if key.startswith(failed)}
    assert failed not in {key.split("_")[0] for key in batch.keys}
    # leftovers: a straggler's trajectory of the evicted group, and its prompt key brought back tag-only
    # by a status put (kv_put creates missing keys)
    leftover = loop.run(tq_partition, failed, 1)
    tag_only_prompt = str(uuid.uuid4())
    tq.kv_put(key=tag_only_prompt, partition_id=tq_partition, tag={"status": "finished"})
    pending = loop.submit(tq_partition, 2, 2)  # real prompt rows, tag-only as in sync mode
    sidecar.sweep_for(GRACE_S + 2 * INTERVAL_S)
    assert sidecar.deleted == set(leftover)
    assert {failed, tag_only_prompt, *pending} <= keys(tq, tq_partition)


def test_a_resume_from_before_the_first_validation_sweeps_and_reclaims_with_no_val_partition(
    tq: Any, tq_partition: str, val_partition: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    """trainer.val_before_train=False: the checkpoint of step 1 is taken before any validation, so the
    TQ it restores has no `val`. A scope partition the row store lacks is swept as empty, owner rule or not:
    sweeps complete, each warning that `val` does not exist, and the restored batch is reclaimed before the
    resumed run first validates; once it has, the warning stops."""
    trainer = gc_trainer(sidecar, tq, tq_partition, val_partition, tmp_path)  # no validate() first
    saved: list[Path] = []
    batch = trainer.step(lambda trainer, _batch: saved.append(trainer._save_checkpoint()))
    trainer.on_train_end()
    assert val_partition not in tq.kv_list()

    resumed = Sidecar(sidecar.config, sidecar.store)
    trainer = gc_trainer(resumed, tq, tq_partition, val_partition, tmp_path)
    tq.load_checkpoint(str(saved[0]))
    leaked = set(batch.keys)
    assert leaked <= keys(tq, tq_partition) and val_partition not in tq.kv_list()
    reports = resumed.sweep_for(GRACE_S + 2 * INTERVAL_S)
    assert completed(reports), [report.reason for report in reports]
    assert all(missing_partitions(report) == [val_partition] for report in reports)
    assert resumed.deleted == leaked
    trainer.validate()  # the resumed run's first validation creates `val`: sweeps go on completing
    reports = resumed.sweep_for(2 * INTERVAL_S)
    assert completed(reports) and not any(missing_partitions(report) for report in reports)
    trainer.on_train_end()
