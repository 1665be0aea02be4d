"""tq_gc.integrations.verl's BatchHolder and replay-buffer wrap, on the memory state store: what a verl
trainer holds, by phase, and the presence admission that lets sweeps run at all."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest

from tq_gc.integrations.verl import STEP, VALIDATE, BatchHolder, hold_sampled_batches, presence_admission
from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.state.memory import MemoryState


@pytest.fixture
def registry() -> AdmissionRegistry:
    return AdmissionRegistry(MemoryState("verl-job"))


def test_a_holder_is_present_from_its_start_and_holds_each_phase_until_released(
    registry: AdmissionRegistry,
) -> None:
    holder = BatchHolder(GcClient(registry), run_id="run-1")
    assert registry.live() == {"verl/run-1/trainer": {}}
    assert presence_admission("verl/run-1/trainer") and not presence_admission("verl/run-1/step/1")
    holder.hold("train", ["u_0_0", "u_1_0"])
    holder.phase = VALIDATE
    holder.hold("val", ["v_0_0"])
    holder.hold("val", [])  # nothing to hold: no admission
    assert registry.live() == {
        "verl/run-1/trainer": {},
        "verl/run-1/step/1": {"train": ["u_0_0", "u_1_0"]},
        "verl/run-1/validate/2": {"val": ["v_0_0"]},
    }
    holder.release(VALIDATE)
    assert set(registry.live()) == {"verl/run-1/trainer", "verl/run-1/step/1"}
    holder.release(STEP)
    holder.release(STEP)  # released twice: nothing left to release
    assert set(registry.live()) == {"verl/run-1/trainer"}
    holder.hold("train", ["w_0_0"])
    holder.close()
    assert registry.live() == {}


@dataclass
class Batch:
    """verl's KVBatchMeta, as far as the trainer reads it."""

    partition_id: str
    keys: list[str]


class Sampler:
    """A replay buffer's sample() and _materialize_batch as verl's call them, recording what was held
    when it cleared the prompt rows."""

    def __init__(self, registry: AdmissionRegistry, snapshot: dict[str, dict[str, Any]]) -> None:
        self.registry = registry
        self.snapshot = snapshot
        self.held_at_clear: dict[str, Any] = {}

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Batch, dict[str, Any]]:
        uids = sorted({key.split("_")[0] for key in self.snapshot})[:batch_size]
        return self._materialize_batch(partition_id, uids, self.snapshot), {}

    def _materialize_batch(
        self,
        partition_id: str,
        selected_prompt_uids: list[str],
        partition_snapshot: dict[str, dict[str, Any]],
    ) -> Batch:
        self.held_at_clear = self.registry.live()  # verl clears the prompt rows here
        keys = [key for key in partition_snapshot if key.split("_")[0] in selected_prompt_uids]
        return Batch(partition_id, keys)


class OwnSampler(Sampler):
    """A custom sampler that builds its batch without _materialize_batch."""

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Batch, dict[str, Any]]:
        self.held_at_clear = self.registry.live()
        return Batch(partition_id, sorted(self.snapshot)), {}


SNAPSHOT: dict[str, dict[str, Any]] = {"a-1_0_0": {}, "a-1_1_0": {}, "b-2_0_0": {}, "c-3_0_0": {}}


def test_the_sampled_trajectories_are_admitted_before_their_prompt_rows_are_cleared(
    registry: AdmissionRegistry,
) -> None:
    sampler = hold_sampled_batches(Sampler(registry, SNAPSHOT), BatchHolder(GcClient(registry), run_id="r"))
    batch = sampler._materialize_batch("train", ["a-1", "c-3"], SNAPSHOT)
    assert batch.keys == ["a-1_0_0", "a-1_1_0", "c-3_0_0"]
    assert sampler.held_at_clear["verl/r/step/1"] == {"train": sorted(batch.keys)}
    sampler.sample(1, "train", 2)  # through _materialize_batch: admitted once
    assert set(registry.live()) == {"verl/r/trainer", "verl/r/step/1", "verl/r/step/2"}


def test_a_sampler_of_its_own_is_named_at_start_and_its_batch_admitted_when_sample_returns(
    registry: AdmissionRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tq_gc.integrations.verl"):
        sampler = hold_sampled_batches(OwnSampler(registry, SNAPSHOT), BatchHolder(GcClient(registry), "r"))
    [warning] = caplog.records
    assert "OwnSampler" in warning.getMessage() and "_materialize_batch" in warning.getMessage()
    sampler.sample(1, "train", 2)
    assert sampler.held_at_clear == {"verl/r/trainer": {}}
    assert registry.live()["verl/r/step/1"] == {"train": sorted(SNAPSHOT)}


def test_a_replay_buffer_without_sample_is_refused(registry: AdmissionRegistry) -> None:
    with pytest.raises(TypeError, match="sample"):
        hold_sampled_batches(object(), BatchHolder(GcClient(registry)))
