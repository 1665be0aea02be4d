"""Schema 2 (NeMo RL's August branches): attempts `{attempt_uuid, status, receipt, reward, staging_keys}`.

A sealed attempt carries a receipt whose manifest names its staging keys. A finalized group (statuses
`finalized`, `claimed_for_training`, `applied_uncheckpointed`) owns canonical rows instead: its
`canonical_meta` is a `KVBatchMeta` dataclass (read here as an inert record, torchfile.py) naming them,
`sample_ids` in `partition_id`, and its tags' route plans name the staging rows still needed (deferred
router replay); its attempts' other staging rows are cleared by finalization, and a restore needs none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError
from tq_gc.references.nemo_rl.ledger import AttemptRules, LedgerRows, current_sealed_keys
from tq_gc.references.nemo_rl.replay import route_plan_keys
from tq_gc.references.nemo_rl.torchfile import KVBatchMetaRecord

VERSION = 2
RULES = AttemptRules(
    statuses=frozenset({"reserved", "dispatched", "sealed", "failed", "abandoned"}),
    keyed_statuses=frozenset(),
    sealed_needs_receipt=True,
    gate_identity=True,
)
GROUP_STATUSES = frozenset(
    {
        "generating",
        "ready_to_finalize",
        "finalizing",
        "finalization_unknown",
        "finalized",
        "claimed_for_training",
        "applied_uncheckpointed",
    }
)
FINALIZED_STATUSES = frozenset({"finalized", "claimed_for_training", "applied_uncheckpointed"})


def rows(state: Mapping[str, Any], budget: KeyBudget) -> LedgerRows:
    found = LedgerRows()

    def canonical_rows(group: Mapping[str, Any], where: str) -> None:
        status = group.get("status")
        if status not in GROUP_STATUSES:
            raise InventoryError(
                f"{where}.status is {status!r}, not one of {', '.join(sorted(GROUP_STATUSES))}"
            )
        meta = group.get("canonical_meta")
        if meta is None:
            if status in FINALIZED_STATUSES:
                raise InventoryError(
                    f"{where} is {status} without canonical_meta: NeMo RL's restore refuses it"
                )
            return
        if not isinstance(meta, KVBatchMetaRecord):
            raise InventoryError(f"{where}.canonical_meta is {type(meta).__name__}, not a KVBatchMeta")
        partition = meta.get("partition_id")
        if not isinstance(partition, str) or not partition:
            raise InventoryError(
                f"{where}.canonical_meta.partition_id is {partition!r}, not a partition name"
            )
        sample_ids = budget.take(meta.get("sample_ids"), f"{where}.canonical_meta.sample_ids")
        found.canonical.setdefault(partition, set()).update(sample_ids)
        route_plan_keys(meta.get("tags"), found, budget, f"{where}.canonical_meta")

    found.staging_keys |= current_sealed_keys(state, RULES, budget, canonical_rows, _before_canonical)
    return found


def _before_canonical(group: Mapping[str, Any]) -> bool:
    """Whether a group's sealed attempts still own their staging rows: until its canonical rows are
    published (NeMo's `expected_staging_keys`, rollout_recovery.py at 9355cc54, lines 306-332; after,
    its canonical rows' route plans say which staging rows are still needed)."""
    return group.get("canonical_meta") is None
