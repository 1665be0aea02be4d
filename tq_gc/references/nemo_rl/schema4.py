"""Schema 4: two layouts NeMo RL publishes under that number, told apart by the shape of their groups.

Both from `nemo_rl/experience/rollout_recovery.py` with `ROLLOUT_RECOVERY_SCHEMA_VERSION = 4` (the search
tool's code index, 2026-09; not on any branch of the 2026-08 mirror):
- sibling lineage: groups `{group_id, admission_id, prompt_id, prompt_ref{sample_id, task_name},
  task_source, recovery_granularity, restore_level, expected_generations, target_step,
  start_weight_version, status, phase, siblings}`, attempts `{attempt_uuid, status, receipt, reward,
  mask_sample, staging_keys, gym_instance_id, gym_attempt}`; its loader rejects any other field and keeps
  only a sealed attempt's keys ("only sealed attempts may retain receipt data"; a sealed attempt without
  a receipt keeps none). Restore keeps each sibling's current attempt's keys when sealed.
- prompt references: groups `{group_id, admission_id, prompt_id, prompt_ref{sample_id, task_name,
  payload_sha256}, expected_generations, target_step, start_weight_version, phase}` and nothing else:
  no siblings, no attempts, no staging keys. It names no rows.
A group with `siblings` is lineage, one with exactly the prompt-reference fields is a prompt reference;
a ledger mixing them, or with a group of neither shape, cannot be told apart and is refused. An empty
ledger names nothing under either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError
from tq_gc.references.nemo_rl.ledger import AttemptRules, LedgerRows, current_sealed_keys

VERSION = 4
TOP_LEVEL = frozenset({"schema_version", "groups", "batch_shortfall", "sampler_stamps_target_steps"})
PROMPT_GROUP = frozenset(
    {
        "group_id",
        "admission_id",
        "prompt_id",
        "prompt_ref",
        "expected_generations",
        "target_step",
        "start_weight_version",
        "phase",
    }
)
LINEAGE_GROUP = PROMPT_GROUP | {"task_source", "recovery_granularity", "restore_level", "status", "siblings"}
LINEAGE_ATTEMPT = frozenset(
    {
        "attempt_uuid",
        "status",
        "receipt",
        "reward",
        "mask_sample",
        "staging_keys",
        "gym_instance_id",
        "gym_attempt",
    }
)
GROUP_STATUSES = frozenset({"generating", "ready_to_finalize", "finalizing", "finalization_unknown"})
RULES = AttemptRules(
    statuses=frozenset({"reserved", "dispatched", "sealed", "failed", "abandoned"}),
    keyed_statuses=frozenset(),
    sealed_needs_receipt=False,
    gate_identity=True,
)


def rows(state: Mapping[str, Any], budget: KeyBudget) -> LedgerRows:
    unknown = sorted(map(str, set(state) - TOP_LEVEL))
    if unknown:
        raise InventoryError(f"has fields {', '.join(unknown)}, which neither schema-4 layout has")
    groups = state.get("groups")
    if not isinstance(groups, list):
        raise InventoryError(f"groups is {type(groups).__name__}, not a list")
    layouts = {_layout(group, index) for index, group in enumerate(groups)}
    if len(layouts) > 1:
        raise InventoryError(
            "mixes sibling-lineage and prompt-reference groups: NeMo RL publishes two schema-4 layouts, "
            "and this file is neither"
        )
    if layouts != {"lineage"}:
        return LedgerRows()  # prompt references only (or no group): no staging rows named
    return LedgerRows(staging_keys=current_sealed_keys(state, RULES, budget, _check_lineage_group))


def _layout(group: Any, index: int) -> str:
    fields: set[Any] = set(group) if isinstance(group, dict) else set()
    if "siblings" in fields and fields <= LINEAGE_GROUP:
        return "lineage"
    prompt_ref = group.get("prompt_ref") if isinstance(group, dict) else None
    if fields == set(PROMPT_GROUP) and isinstance(prompt_ref, dict) and "payload_sha256" in prompt_ref:
        return "prompt"
    raise InventoryError(
        f"groups[{index}] is of neither schema-4 layout (sibling lineage, prompt references): refused "
        "rather than guessed"
    )


def _check_lineage_group(group: Mapping[str, Any], where: str) -> None:
    if group.get("status") not in GROUP_STATUSES:
        raise InventoryError(
            f"{where}.status is {group.get('status')!r}, not one of {', '.join(sorted(GROUP_STATUSES))}"
        )
    siblings = group.get("siblings")
    for index, sibling in enumerate(siblings if isinstance(siblings, list) else []):
        attempts = sibling.get("attempts") if isinstance(sibling, dict) else None
        for number, attempt in enumerate(attempts if isinstance(attempts, list) else []):
            extra = (
                ", ".join(sorted(map(str, set(attempt) - LINEAGE_ATTEMPT)))
                if isinstance(attempt, dict)
                else ""
            )
            if extra:
                raise InventoryError(
                    f"{where}.siblings[{index}].attempts[{number}] has fields {extra}, which NeMo RL's "
                    "schema-4 loader rejects"
                )
