"""Schema 3 (NeMo RL's current branches), in both layouts published under that number.

Main line: attempts `{attempt_index, attempt_uuid, status, receipt, completion_receipt, reward,
mask_sample, staging_keys}`, groups with `admission_id`, `prompt_ref`, `task_source`,
`recovery_granularity`, `phase`, `status`; a sealed attempt may have no receipt (a terminal capture
failure), and then no keys. Another branch: attempts `{attempt_id, gate_rollout_id, status, receipt,
reward, staging_keys}` with the extra status `finalized` (its rows are canonical by then, and its restore
keeps only sealed attempts' keys). Both keep the staging keys of each sibling's last attempt when sealed,
which is all that is read here; other fields are not this reader's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError
from tq_gc.references.nemo_rl.ledger import AttemptRules, LedgerRows, current_sealed_keys

VERSION = 3
RULES = AttemptRules(
    statuses=frozenset({"reserved", "dispatched", "sealed", "finalized", "failed", "abandoned"}),
    keyed_statuses=frozenset({"finalized"}),
    sealed_needs_receipt=False,
)


def rows(state: Mapping[str, Any], budget: KeyBudget) -> LedgerRows:
    found = LedgerRows(staging_keys=current_sealed_keys(state, RULES, budget, on_group=_check_branch_gates))
    partition = state.get("staging_partition")  # the branch layout binds its ledger to one partition
    if partition is not None:
        if not isinstance(partition, str):
            raise InventoryError(f"staging_partition is {partition!r}, not a partition name")
        found.named_partitions.add(partition)
    return found


def _check_branch_gates(group: Mapping[str, Any], where: str) -> None:
    """The branch layout's identities, as its loader checks them (rollout_recovery.py at
    amahishi/partial-rollout-ledger-integration-b2a048c9a, lines 508-590): each sibling's
    `logical_rollout_id` is `{group_id}_g{index}`, each attempt's `gate_rollout_id` is
    `{logical_rollout_id}_a{attempt_id}` with a non-empty `attempt_id`, and a sealed or finalized
    attempt's receipt names that gate id. Anything else NeMo refuses, and its restore stops. Attempts of
    the main-line layout (no `attempt_id`, no `gate_rollout_id`) are not checked here."""
    siblings = group.get("siblings")
    for index, sibling in enumerate(siblings if isinstance(siblings, list) else []):
        attempts = sibling.get("attempts") if isinstance(sibling, dict) else None
        for number, attempt in enumerate(attempts if isinstance(attempts, list) else []):
            if isinstance(attempt, dict) and ("attempt_id" in attempt or "gate_rollout_id" in attempt):
                _check_gate(group, index, sibling, attempt, f"{where}.siblings[{index}].attempts[{number}]")


def _check_gate(
    group: Mapping[str, Any], index: int, sibling: Mapping[str, Any], attempt: Mapping[str, Any], at: str
) -> None:
    logical = f"{group.get('group_id')}_g{index}"
    attempt_id = attempt.get("attempt_id")
    problem = None
    if sibling.get("logical_rollout_id") != logical or sibling.get("generation_index") != index:
        problem = f"its sibling is not {logical!r} at generation {index}"
    elif not isinstance(attempt_id, str) or not attempt_id:
        problem = "its attempt_id is not a non-empty string"
    elif attempt.get("gate_rollout_id") != f"{logical}_a{attempt_id}":
        problem = f"its gate_rollout_id is not {logical}_a{attempt_id}"
    elif attempt.get("status") in {"sealed", "finalized"}:
        receipt = attempt.get("receipt")
        named = receipt.get("rollout_id") if isinstance(receipt, dict) else None
        if named != attempt["gate_rollout_id"]:
            problem = f"its receipt is another rollout's ({named!r})"
    if problem is not None:
        raise InventoryError(f"{at}: {problem}: NeMo RL's restore refuses it")
