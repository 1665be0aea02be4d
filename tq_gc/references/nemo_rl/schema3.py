"""Schema 3 (NeMo RL's current branches), in both layouts published under that number.

Main line: attempts `{attempt_index, attempt_uuid, status, receipt, completion_receipt, reward,
mask_sample, staging_keys}`, groups with `admission_id`, `prompt_ref`, `task_source`,
`recovery_granularity`, `phase`, `status`; a sealed attempt may have no receipt (a terminal capture
failure), and then no keys. Another branch: attempts `{attempt_id, gate_rollout_id, status, receipt,
reward, staging_keys}` with the extra status `finalized` (its rows are canonical by then, and its restore
keeps only sealed attempts' keys). Both keep the staging keys of each sibling's last attempt when sealed,
which is what is read here, with the identities that bind a receipt to its attempt (`_check_gates`);
other fields are not this reader's business.
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
    seen_attempt_ids: set[str] = set()  # the branch's loader refuses one used twice in the ledger
    found = LedgerRows(
        staging_keys=current_sealed_keys(
            state, RULES, budget, on_group=lambda group, where: _check_gates(group, where, seen_attempt_ids)
        )
    )
    partition = state.get("staging_partition")  # the branch layout binds its ledger to one partition
    if partition is not None:
        if not isinstance(partition, str):
            raise InventoryError(f"staging_partition is {partition!r}, not a partition name")
        found.named_partitions.add(partition)
    return found


def _check_gates(group: Mapping[str, Any], where: str, seen_attempt_ids: set[str]) -> None:
    """Each attempt's identity as its layout's loader checks it, refusing what NeMo refuses (its restore
    then stops). The branch layout (attempts with `attempt_id`): `_check_gate`. The main line (attempts
    with `attempt_index`; rollout_recovery.py schema 3 in the code index, `_group_from_state`): attempt
    indices run 0, 1, ... within their sibling, and a sealed receipt names `gym_capture_key(logical id,
    attempt_index)`: the logical id `{group_id}_g{index}` itself for attempt 0, `{logical id}-a{n}` after.
    """
    siblings = group.get("siblings")
    for index, sibling in enumerate(siblings if isinstance(siblings, list) else []):
        attempts = sibling.get("attempts") if isinstance(sibling, dict) else None
        for number, attempt in enumerate(attempts if isinstance(attempts, list) else []):
            at = f"{where}.siblings[{index}].attempts[{number}]"
            if not isinstance(attempt, dict):
                continue  # refused by current_sealed_keys
            if "attempt_id" in attempt or "gate_rollout_id" in attempt:
                _check_gate(group, index, sibling, attempt, at)
                if attempt["attempt_id"] in seen_attempt_ids:
                    raise InventoryError(
                        f"{at}: the ledger holds attempt_id {attempt['attempt_id']!r} twice: "
                        "NeMo RL's restore refuses it"
                    )
                seen_attempt_ids.add(attempt["attempt_id"])
            else:
                _check_capture_key(group, index, sibling, attempt, number, at)


def _check_capture_key(
    group: Mapping[str, Any],
    index: int,
    sibling: Mapping[str, Any],
    attempt: Mapping[str, Any],
    number: int,
    at: str,
) -> None:
    logical = f"{group.get('group_id')}_g{index}"
    attempt_index = attempt.get("attempt_index")
    if sibling.get("generation_index") != index or type(sibling.get("generation_index")) is not int:
        raise InventoryError(
            f"{at}: its sibling's generation_index is not {index}: NeMo RL's restore refuses it"
        )
    if type(attempt_index) is not int or attempt_index != number:
        raise InventoryError(f"{at}.attempt_index is not {number}: NeMo RL's restore refuses it")
    receipt = attempt.get("receipt")
    if attempt.get("status") != "sealed" or not isinstance(receipt, dict):
        return
    capture_key = logical if number == 0 else f"{logical}-a{number}"
    if receipt.get("rollout_id") != capture_key:
        raise InventoryError(
            f"{at}: the sealed receipt is another attempt's ({receipt.get('rollout_id')!r}, not "
            f"{capture_key!r}): NeMo RL's restore refuses it"
        )


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
