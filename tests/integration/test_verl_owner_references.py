"""verl's layout on a real TransferQueue, collected with owner references.

verl (`verl/trainer/ppo/v1/`) keeps, per partition (`train`, `val`), one prompt row per GRPO group keyed
`{uid}` (a uuid4 hex: no '_'), tagged `is_prompt`, `status` and `global_steps`, and the group's
trajectory rows keyed `{uid}_{session_id}_{index}`. Its replay buffer clears a group's prompt row and
trajectories in one `kv_clear`; a crash or a failed clear can leave the trajectories behind. Here the
rows are written with TQ's own calls, as verl writes them, and tq-gc sweeps them in-process through its
TransferQueue row store, with deploy/examples/verl.yaml (partition names made unique to the test) and
the state store on a manual clock, so grace passes without sleeping.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tq_gc.collector import Collector
from tq_gc.config import TransferQueueConfig, parse_config
from tq_gc.model import Outcome, SweepReport
from tq_gc.state.memory import ManualClock, MemoryState
from tq_gc.stores.transferqueue import TransferQueueRowStore

pytestmark = pytest.mark.ray

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verl.yaml"
GRACE_S = 900  # the example's


def example_config(ray_address: str, train: str, val: str) -> dict[str, Any]:
    """deploy/examples/verl.yaml, with this test's partitions for `train` and `val`."""
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    renamed = {"train": train, "val": val}
    for entry in [*values["scope"], *values["owner_references"]]:
        entry["partition"] = renamed[entry["partition"]]
    values["transfer_queue"] = {"ray_address": ray_address}
    return values


@pytest.fixture
def val_partition(tq: Any) -> Iterator[str]:
    """A second fresh partition (verl's `val`), cleared afterwards."""
    partition = f"tqgc-val-{uuid.uuid4().hex[:10]}"
    yield partition
    keys = list(tq.kv_list(partition).get(partition, {}))
    if keys:
        tq.kv_clear(keys, partition)


@dataclass
class Verl:
    """What verl's agent loop and replay buffer write and clear, with TQ's own calls."""

    tq: Any

    def prompt(self, partition: str, uid: str, status: str, global_steps: int = 3) -> None:
        tag = {"is_prompt": True, "status": status, "global_steps": global_steps}
        self.tq.kv_put(key=uid, partition_id=partition, tag=tag)

    def trajectories(self, partition: str, uid: str, sessions: int = 2, global_steps: int = 3) -> list[str]:
        import torch

        keys = [f"{uid}_{session_id}_0" for session_id in range(sessions)]
        for key in keys:
            tag = {"is_prompt": False, "seq_len": 3, "global_steps": global_steps}
            self.tq.kv_put(
                key=key, partition_id=partition, fields={"input_ids": torch.tensor([1, 2, 3])}, tag=tag
            )
        return keys

    def group(self, partition: str, status: str = "running") -> tuple[str, list[str]]:
        uid = uuid.uuid4().hex
        self.prompt(partition, uid, "pending")
        keys = self.trajectories(partition, uid)
        self.prompt(partition, uid, status)
        return uid, keys

    def keys(self, partition: str) -> set[str]:
        return set(self.tq.kv_list(partition).get(partition, {}))


class Sweeper:
    def __init__(self, ray_address: str, store: TransferQueueRowStore, train: str, val: str) -> None:
        self.clock = ManualClock()
        self.state = MemoryState("verl-job", clock_ms=self.clock)
        self.store = store
        self.config = parse_config(example_config(ray_address, train, val))
        assert self.config.grace_seconds == GRACE_S

    def sweep(self, execute: bool = True) -> SweepReport:
        report = Collector(self.config, self.state, self.store, holder="test").sweep(dry_run=not execute)
        assert report.outcome in (Outcome.COMPLETED, Outcome.DRY_RUN), report.reason
        return report

    def observe_past_grace(self) -> None:
        for _ in range(2):
            self.clock.advance(GRACE_S * 0.55)
            self.sweep(execute=False)


@pytest.fixture
def sweeper(ray_cluster: Any, tq: Any, tq_partition: str, val_partition: str) -> Iterator[Sweeper]:
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
        yield Sweeper(ray_cluster.address, store, tq_partition, val_partition)


def test_verl_layout_live_groups_kept_cleared_groups_reclaimed_prompts_never_in_scope(
    tq: Any, tq_partition: str, val_partition: str, sweeper: Sweeper
) -> None:
    train, val, verl = tq_partition, val_partition, Verl(tq)
    live_uid, live = verl.group(train, "running")
    done_uid, done = verl.group(train, "finished")
    val_uid, validating = verl.group(val, "finished")
    pending_uid = uuid.uuid4().hex
    verl.prompt(train, pending_uid, "pending")  # a group whose sessions have not started
    early_uid = uuid.uuid4().hex
    early = verl.trajectories(train, early_uid)  # its prompt status is published after them
    prompts = {train: {live_uid, done_uid, pending_uid}, val: {val_uid}}

    first = sweeper.sweep()
    assert (first.counts.in_scope, first.counts.referenced["owners"], first.counts.within_grace) == (8, 6, 2)
    tq.kv_clear([done_uid], train)  # the replay buffer's clear got as far as the prompt row only
    prompts[train].remove(done_uid)
    sweeper.clock.advance(GRACE_S * 0.55)
    sweeper.sweep(execute=False)
    verl.prompt(train, early_uid, "running")  # now the early trajectories have their owner
    prompts[train].add(early_uid)
    sweeper.clock.advance(GRACE_S * 0.55)
    sweeper.sweep(execute=False)
    sweeper.observe_past_grace()

    report = sweeper.sweep()
    assert {row.key for row in report.deleted_sample} == set(done)
    assert report.counts.deleted == 2 and report.counts.referenced["owners"] == 6  # live, val, early
    assert verl.keys(train) == prompts[train] | set(live) | set(early)
    assert verl.keys(val) == prompts[val] | set(validating)
    # the prompt rows, with no trajectory or long finished, were never candidates
    assert report.counts.in_scope == 8 and report.counts.listed == 8 + 4  # 4 prompt rows


def test_a_trajectory_written_with_no_prompt_row_ever_is_reclaimed_after_grace(
    tq: Any, tq_partition: str, val_partition: str, sweeper: Sweeper
) -> None:
    verl = Verl(tq)
    verl.prompt(val_partition, uuid.uuid4().hex, "pending")
    orphans = verl.trajectories(tq_partition, uuid.uuid4().hex)
    assert sweeper.sweep().counts.within_grace == 2
    sweeper.observe_past_grace()
    assert sweeper.sweep().counts.deleted == 2
    assert verl.keys(tq_partition) == set() and orphans
