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
    found = LedgerRows(staging_keys=current_sealed_keys(state, RULES, budget))
    partition = state.get("staging_partition")  # the branch layout binds its ledger to one partition
    if partition is not None:
        if not isinstance(partition, str):
            raise InventoryError(f"staging_partition is {partition!r}, not a partition name")
        found.named_partitions.add(partition)
    return found
