"""A custom sampler (`trainer.v1.sampler.custom_sampler`: a subclass of verl's ReplayBuffer that verl's
`_build_replay_buffer` loads) that builds its batch itself, without `_materialize_batch`: the trainer
integration says so at start and admits the batch when `sample()` returns, so a step longer than grace
loses no row. On verl 0.9.1's own ReplayBufferAsync and a real TransferQueue."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_verl_replay_buffer import STEP_S, Sidecar, completed, example_config, keys

from tools.testbed.verl_job import VerlShapedTrainer, replay_buffer, replay_buffer_module
from tq_gc.config import TransferQueueConfig
from tq_gc.integrations.verl import TqGcTrainerMixin
from tq_gc.publish.client import GcClient
from tq_gc.stores.transferqueue import TransferQueueRowStore

pytestmark = pytest.mark.ray
VAL = f"tqgc-val-{uuid.uuid4().hex[:10]}"  # never written: this test does not validate


@pytest.fixture
def sidecar(ray_cluster: Any, tq: Any, tq_partition: str) -> Iterator[Sidecar]:
    config = example_config(ray_cluster.address, tq_partition, VAL)
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
        yield Sidecar(config, store)


def finished_first_sampler() -> Any:
    """A user's sampler: the first finished groups, cleared and handed over in its own `sample()`."""
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta

    class FinishedFirst(replay_buffer_module().ReplayBufferAsync):  # type: ignore[misc]
        def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict[str, Any]]:
            listed = tq.kv_list(partition_id).get(partition_id, {})
            finished = [k for k, tag in listed.items() if "_" not in k and tag.get("status") == "finished"]
            assert len(finished) >= batch_size, "the test runs every rollout before it samples"
            uids = set(finished[:batch_size])
            tq.kv_clear(partition_id=partition_id, keys=sorted(uids))
            batch = [key for key in listed if "_" in key and key.split("_")[0] in uids]
            return KVBatchMeta(partition_id=partition_id, keys=batch, tags=[listed[k] for k in batch]), {}

    built = replay_buffer()
    built.__class__ = FinishedFirst  # built as verl builds a custom sampler: its constructor is verl's
    return built


def test_a_custom_sampler_without_materialize_batch_is_named_at_start_and_its_batch_held(
    tq: Any, tq_partition: str, sidecar: Sidecar, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class CustomSampled(VerlShapedTrainer):
        def _build_replay_buffer(self) -> Any:
            return finished_first_sampler()

    class Trainer(TqGcTrainerMixin, CustomSampled):
        def tq_gc_client(self) -> GcClient:
            return sidecar.client()

    with caplog.at_level(logging.WARNING, logger="tq_gc.integrations.verl"):
        trainer = Trainer(tq, tq_partition, VAL, tmp_path / "ckpt")
    [started] = [record.getMessage() for record in caplog.records]
    assert "FinishedFirst" in started and "_materialize_batch" in started

    def work(trainer: VerlShapedTrainer, batch: Any) -> None:
        assert completed(sidecar.sweep_for(STEP_S))
        assert set(batch.keys) <= keys(tq, tq_partition)  # all still there for the update

    trainer.step(work)
    assert sidecar.deleted == set()
    trainer.on_train_end()
