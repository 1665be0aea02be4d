"""NeMo RL's recovery inventory on a real TransferQueue: generation-cut chunk rows
(`__generation_cut__/{checkpoint_id}/{rollout_id}/{model_call_id}/{seq}`) of checkpoints, protected by
the `rollout_recovery.pt` of each committed checkpoint directory (written with torch.save, as NeMo RL's
data-plane branch does), reclaimed once the checkpoint that listed them is pruned; a checkpoint being
written skips the sweep. tq-gc sweeps in-process through its TransferQueue row store, with
deploy/examples/nemo_rl.yaml (its partition and checkpoint directory made the test's own) and the state
store on a manual clock.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tq_gc.collector import Collector
from tq_gc.config import TransferQueueConfig, parse_config
from tq_gc.model import Cause, Outcome, SweepReport
from tq_gc.state.memory import ManualClock, MemoryState
from tq_gc.stores.transferqueue import TransferQueueRowStore

from support.nemo_rl_checkpoints import cut_key, inventory, write_checkpoint

pytestmark = pytest.mark.ray

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "nemo_rl.yaml"
GRACE_S = 900  # the example's
PutRows = Any


def example_config(ray_address: str, staging: str, ckpt: Path) -> dict[str, Any]:
    """deploy/examples/nemo_rl.yaml, with this test's partition and checkpoint directory."""
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    [scope], [manifest] = values["scope"], values["manifests"]
    scope["partition"] = manifest["partition"] = staging
    manifest["glob"] = manifest["glob"].replace("/checkpoints/", f"{ckpt}/", 1)
    values.update(state_url="memory://", transfer_queue={"ray_address": ray_address})
    return values


class Sweeper:
    def __init__(self, ray_address: str, store: TransferQueueRowStore, staging: str, ckpt: Path) -> None:
        self.clock = ManualClock()
        self.state = MemoryState("nemo-job", clock_ms=self.clock)
        self.store = store
        self.config = parse_config(example_config(ray_address, staging, ckpt))
        assert self.config.grace_seconds == GRACE_S

    def sweep(self, execute: bool = True) -> SweepReport:
        return Collector(self.config, self.state, self.store, holder="test").sweep(dry_run=not execute)

    def observe_past_grace(self) -> None:
        for _ in range(2):
            self.clock.advance(GRACE_S * 0.55)
            assert self.sweep(execute=False).outcome is Outcome.DRY_RUN


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    (tmp_path / "checkpoints").mkdir()
    return tmp_path / "checkpoints"


@pytest.fixture
def sweeper(ray_cluster: Any, tq: Any, tq_partition: str, ckpt: Path) -> Iterator[Sweeper]:
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
        yield Sweeper(ray_cluster.address, store, tq_partition, ckpt)


def cut_rows(checkpoint: str, rollout: str, chunks: int = 2) -> list[str]:
    return [cut_key(checkpoint, rollout, "call3", seq) for seq in range(chunks)]


def test_cut_rows_of_an_older_checkpoint_reclaimed_those_the_newest_inventory_lists_kept(
    tq: Any, tq_partition: str, put_rows: PutRows, ckpt: Path, sweeper: Sweeper
) -> None:
    staging = tq_partition
    older = cut_rows("step_3", "g1_g0_a1f2e")
    newest = cut_rows("step_4", "g2_g1_a77c0")
    live_call = ["g2_g1_a77c0/call4"]  # a model call's own staging row: out of this scope
    put_rows(
        staging,
        older + newest + live_call,
        [{"rollout_id": key.split("/")[2]} for key in older + newest] + [{}],
    )
    write_checkpoint(ckpt / "step_3", inventory({"g1": older}))
    write_checkpoint(ckpt / "step_4", inventory({"g2": newest}))

    sweeper.sweep()
    sweeper.observe_past_grace()
    report = sweeper.sweep()  # both committed checkpoints hold their rows: a restore may use either
    assert (report.counts.deleted, report.counts.referenced["manifests"]) == (0, 4)

    # NeMo RL saves step_5 (tmp_step_5, then renamed) and prunes step_3 (keep_top_k)
    write_checkpoint(ckpt / "tmp_step_5", inventory({"g2": newest}))
    skipped = sweeper.sweep()
    assert (skipped.outcome, skipped.cause) == (Outcome.SKIPPED, Cause.CHECKPOINT_IN_PROGRESS)
    (ckpt / "tmp_step_5").rename(ckpt / "step_5")
    shutil.rmtree(ckpt / "step_3")
    assert sweeper.sweep().counts.within_grace == 2
    sweeper.observe_past_grace()
    report = sweeper.sweep()

    assert report.outcome is Outcome.COMPLETED
    assert {row.key for row in report.deleted_sample} == set(older)
    assert set(tq.kv_list(staging)[staging]) == set(newest + live_call)
