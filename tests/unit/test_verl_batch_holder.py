"""tq_gc.integrations.verl's BatchHolder and replay-buffer wrap, on the memory state store: what a verl
trainer holds, by phase, and the presence admission that lets sweeps run at all."""

from __future__ import annotations

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


class Sampler:
    """A replay buffer's _materialize_batch as verl's calls it, recording what was held when it ran."""

    def __init__(self, registry: AdmissionRegistry) -> None:
        self.registry = registry
        self.held_at_clear: dict[str, Any] = {}

    def _materialize_batch(
        self,
        partition_id: str,
        selected_prompt_uids: list[str],
        partition_snapshot: dict[str, dict[str, Any]],
    ) -> list[str]:
        self.held_at_clear = self.registry.live()  # verl clears the prompt rows here
        return [key for key in partition_snapshot if key.split("_")[0] in selected_prompt_uids]


def test_the_sampled_trajectories_are_admitted_before_their_prompt_rows_are_cleared(
    registry: AdmissionRegistry,
) -> None:
    sampler = hold_sampled_batches(Sampler(registry), BatchHolder(GcClient(registry), run_id="r"))
    snapshot = {"a-1_0_0": {}, "a-1_1_0": {}, "b-2_0_0": {}, "c-3_0_0": {}}
    batch = sampler._materialize_batch("train", ["a-1", "c-3"], snapshot)
    assert batch == ["a-1_0_0", "a-1_1_0", "c-3_0_0"]
    assert sampler.held_at_clear["verl/r/step/1"] == {"train": sorted(batch)}


def test_a_replay_buffer_without_materialize_batch_is_refused(registry: AdmissionRegistry) -> None:
    with pytest.raises(TypeError, match="_materialize_batch"):
        hold_sampled_batches(object(), BatchHolder(GcClient(registry)))
