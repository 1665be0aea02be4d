"""NeMo RL's rollout recovery ledgers (`rollout_recovery.pt`) as NeMo RL writes them: schema 2 (the
August branches) and schema 3 (main line), and one that names billions of keys through shared
references (what a reader must refuse)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from support.nemo_rl_data_plane import CANONICAL, STAGING, KVBatchMeta, cut_key
from support.nemo_rl_snapshots import route_plan

SCHEMA_VERSION = 2


# ---- schema 2 ------------------------------------------------------------------------------------------


def attempt(status: str, staging_keys: Sequence[str] = (), rollout_id: str = "") -> dict[str, Any]:
    """A schema-2 attempt; a sealed one carries a receipt naming its keys (others carry none)."""
    sealed = status == "sealed"
    return {
        "attempt_uuid": uuid.uuid4().bytes,
        "status": status,
        "receipt": (
            {"rollout_id": rollout_id, "manifest": [{"staging_key": key} for key in staging_keys]}
            if sealed
            else None
        ),
        "reward": 1.0 if sealed else None,
        "staging_keys": list(staging_keys),
    }


def group(
    group_id: str,
    attempts_per_sibling: Sequence[Sequence[dict[str, Any]]],
    *,
    status: str = "generating",
    canonical_meta: KVBatchMeta | None = None,
) -> dict[str, Any]:
    finalized = canonical_meta is not None
    return {
        "group_id": group_id,
        "prompt_id": "70",
        "prompt_ref": {"sample_id": "70", "task_name": "nemo_gym"},
        "expected_generations": len(attempts_per_sibling),
        "target_step": 3,
        "start_weight_version": 3,
        "status": status,
        "canonical_meta": canonical_meta,
        "group_min_weight_version": 3 if finalized else None,
        "group_max_weight_version": 3 if finalized else None,
        "claimed_train_step": 4 if status in ("claimed_for_training", "applied_uncheckpointed") else None,
        "siblings": [
            {"generation_index": index, "attempts": gated(group_id, index, attempts)}
            for index, attempts in enumerate(attempts_per_sibling)
        ],
    }


def gated(group_id: str, index: int, attempts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The attempts with each sealed receipt's `rollout_id` the gate id NeMo derives and checks on load,
    `{group_id}_g{index}_a{attempt_uuid hex}` (with `-a{gym_attempt}` for a resumed Gym attempt)."""
    result = []
    for attempt_state in attempts:
        receipt = attempt_state.get("receipt")
        if isinstance(receipt, dict) and isinstance(attempt_state.get("attempt_uuid"), bytes):
            gate = f"{group_id}_g{index}_a{attempt_state['attempt_uuid'].hex()}"
            if attempt_state.get("gym_attempt"):
                gate += f"-a{attempt_state['gym_attempt']}"
            attempt_state = {**attempt_state, "receipt": {**receipt, "rollout_id": gate}}
        result.append(attempt_state)
    return result


def finalized_group(
    group_id: str,
    keys_per_sibling: Sequence[Sequence[str]],
    status: str = "finalized",
    route: Sequence[str] = (),
    staging: str = STAGING,
) -> dict[str, Any]:
    """A schema-2 group whose siblings are sealed and whose canonical rows are published: its
    canonical_meta is a KVBatchMeta dataclass (what weights-only loading refuses). With `route`, the
    first row's tags carry a route plan (deferred router replay) whose cleanup keys are `route`."""
    sample_ids = [f"{group_id}_g{index}" for index in range(len(keys_per_sibling))]
    meta = KVBatchMeta(
        partition_id=CANONICAL,
        task_name="train",
        sample_ids=sample_ids,
        fields=["input_ids"],
        sequence_lengths=[7] * len(sample_ids),
        tags=[{"weight_version": torch.tensor(3)} for _ in sample_ids],  # stamp_tags mirrors tensors
    )
    if route:
        assert meta.tags is not None
        meta.tags[0]["route_assembly_plan"] = route_plan(route, staging)
    attempts = [
        [attempt("sealed", keys, rollout_id=f"{group_id}_g{i}")] for i, keys in enumerate(keys_per_sibling)
    ]
    return group(group_id, attempts, status=status, canonical_meta=meta)


def inventory(
    keys_by_group: Mapping[str, Sequence[str]], schema_version: Any = SCHEMA_VERSION
) -> dict[str, Any]:
    """A schema-2 ledger: per group, one sibling sealed holding the keys (after a failed attempt) and one
    still dispatched."""
    groups = [
        group(
            group_id,
            [
                [attempt("failed"), attempt("sealed", keys, rollout_id=f"{group_id}_g0_a0")],
                [attempt("dispatched")],
            ],
        )
        for group_id, keys in keys_by_group.items()
    ]
    return {"schema_version": schema_version, "groups": groups, "open_train_step": None}


# ---- schema 3 ------------------------------------------------------------------------------------------


def attempt_v3(
    index: int, status: str, staging_keys: Sequence[str] = (), rollout_id: str = ""
) -> dict[str, Any]:
    """A schema-3 attempt (main line): a sealed one has a receipt with its keys, or none and no keys."""
    sealed = status == "sealed"
    receipt = (
        {"rollout_id": rollout_id, "manifest": [{"staging_key": key} for key in staging_keys]}
        if sealed and staging_keys
        else None
    )
    return {
        "attempt_index": index,
        "attempt_uuid": uuid.uuid4().bytes,
        "status": status,
        "receipt": receipt,
        "completion_receipt": None,
        "reward": 0.5 if sealed else None,
        "mask_sample": False if sealed else None,
        "staging_keys": list(staging_keys),
    }


def group_v3(group_id: str, attempts_per_sibling: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    current = [attempts[-1]["status"] for attempts in attempts_per_sibling]
    sealed = all(status == "sealed" for status in current)
    return {
        "group_id": group_id,
        "admission_id": f"admission-{group_id}",
        "prompt_id": "12",
        "prompt_ref": {"sample_id": "12", "task_name": "nemo_gym"},
        "task_source": "math",
        "resolved_agent_name": "math_agent" if "sealed" in current else None,
        "recovery_granularity": "sibling",
        "expected_generations": len(attempts_per_sibling),
        "target_step": 5,
        "start_weight_version": 4,
        "status": "ready_to_finalize" if sealed else "generating",
        "phase": "admitted",
        "siblings": [
            {"generation_index": index, "attempts": list(attempts)}
            for index, attempts in enumerate(attempts_per_sibling)
        ],
    }


def ledger_v3(groups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema_version": 3,
        "groups": list(groups),
        "pending_completed_execution_acknowledgements": [],
        "batch_shortfall": {4: 1},
        "sampler_stamps_target_steps": True,
    }


def sibling_history_v3(group_id: str, sibling: int, kept: Sequence[str]) -> list[dict[str, Any]]:
    """A sibling whose attempt 0 was abandoned and attempt 1 sealed `kept` (restore keeps those)."""
    return [attempt_v3(0, "abandoned"), attempt_v3(1, "sealed", kept, rollout_id=f"{group_id}_g{sibling}-a1")]


def expanding_ledger(fan_out: int = 3000) -> dict[str, Any]:
    """A schema-3 ledger of a few kilobytes naming fan_out**2 * 100 keys: one group referenced fan_out
    times, with 100 siblings (their generation indices contiguous, as NeMo's loader requires) sharing
    one sealed attempt that lists one key fan_out times."""
    key = cut_key("step_9", "bomb", "call0", 0)
    sealed = attempt_v3(0, "sealed", [key], rollout_id="bomb_g0")
    sealed["staging_keys"], manifest = [key] * fan_out, [{"staging_key": key}] * fan_out  # shared
    bomb = group_v3("bomb", [[sealed]])
    bomb["siblings"] = [
        {
            "generation_index": index,
            "attempts": [{**sealed, "receipt": {"rollout_id": f"bomb_g{index}", "manifest": manifest}}],
        }
        for index in range(100)
    ]
    return ledger_v3([bomb] * fan_out)


# ---- schema 4: two layouts published under one number ----------------------------------------------------
# Read from NeMo RL's rollout_recovery.py versions with ROLLOUT_RECOVERY_SCHEMA_VERSION = 4 in the code
# index (2026-09): the sibling-lineage ledger (groups with `siblings`, attempts with `gym_instance_id`,
# `gym_attempt`; unknown fields rejected) and the prompt-reference ledger (groups with a `prompt_ref`
# carrying `payload_sha256`, no siblings: it names no staging rows).


def attempt_v4(status: str, staging_keys: Sequence[str] = (), rollout_id: str = "") -> dict[str, Any]:
    """A sibling-lineage schema-4 attempt: a sealed one carries reward, mask_sample and (with keys) a
    receipt whose manifest lists them; any other status carries none of these."""
    sealed = status == "sealed"
    receipt = (
        {"rollout_id": rollout_id, "manifest": [{"staging_key": key} for key in staging_keys]}
        if sealed and staging_keys
        else None
    )
    return {
        "attempt_uuid": uuid.uuid4().bytes,
        "status": status,
        "receipt": receipt,
        "reward": 1.0 if sealed else None,
        "mask_sample": False if sealed else None,
        "staging_keys": list(staging_keys),
        "gym_instance_id": None,
        "gym_attempt": 0,
    }


def lineage_group_v4(
    group_id: str, attempts_per_sibling: Sequence[Sequence[dict[str, Any]]]
) -> dict[str, Any]:
    current = [attempts[-1]["status"] for attempts in attempts_per_sibling]
    return {
        "group_id": group_id,
        "admission_id": group_id,
        "prompt_id": "7",
        "prompt_ref": {"sample_id": "7", "task_name": None},
        "task_source": None,
        "recovery_granularity": "sibling",
        "restore_level": "sibling",
        "expected_generations": len(attempts_per_sibling),
        "target_step": 2,
        "start_weight_version": 1,
        "status": "ready_to_finalize" if all(status == "sealed" for status in current) else "generating",
        "phase": "admitted",
        "siblings": [
            {"generation_index": index, "attempts": gated(group_id, index, attempts)}
            for index, attempts in enumerate(attempts_per_sibling)
        ],
    }


def prompt_group_v4(group_id: str) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "admission_id": group_id,
        "prompt_id": "7",
        "prompt_ref": {"sample_id": "7", "task_name": None, "payload_sha256": "c" * 64},
        "expected_generations": 4,
        "target_step": 2,
        "start_weight_version": 1,
        "phase": "admitted",
    }


def ledger_v4(groups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema_version": 4,
        "groups": list(groups),
        "batch_shortfall": {},
        "sampler_stamps_target_steps": True,
    }
