"""What a recovery ledger (`rollout_recovery.pt`) makes NeMo RL's restore keep, by schema version.

NeMo RL's restore keeps, of the ledger, each sibling's current (last) attempt's `staging_keys` when that
attempt is `sealed` (`RolloutRecoveryLedger.expected_staging_keys`), in every schema version that has
attempts. Each version has its own reader (schema2.py, schema3.py) for what differs: the statuses, what a
sealed attempt must carry, and (schema 2) the canonical rows of finalized groups. A NeMo build reads
exactly its own version, so an unknown version fails, naming itself; version 4 has two layouts, told
apart by shape (schema4.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError


@dataclass(slots=True)
class LedgerRows:
    """What one file makes a restore keep: staging keys, canonical rows by partition, and the staging
    partitions the file says its keys are in (when it says)."""

    staging_keys: set[str] = field(default_factory=set)
    canonical: dict[str, set[str]] = field(default_factory=dict)
    named_partitions: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class AttemptRules:
    """What one schema version allows of an attempt."""

    statuses: frozenset[str]
    keyed_statuses: frozenset[str]  # besides "sealed", statuses whose attempts may keep keys
    sealed_needs_receipt: bool
    gate_identity: bool = False  # a sealed receipt's rollout_id must be its attempt's gate id


def schema_version(state: Any) -> int:
    if not isinstance(state, dict):
        raise InventoryError(f"holds {type(state).__name__}, not the ledger's dict")
    version = state.get("schema_version")
    if type(version) is not int:
        raise InventoryError(f"schema_version is {version!r}, not an integer")
    return version


def current_sealed_keys(
    state: Mapping[str, Any],
    rules: AttemptRules,
    budget: KeyBudget,
    on_group: Callable[[Mapping[str, Any], str], None] | None = None,
    owns_staging: Callable[[Mapping[str, Any]], bool] = lambda group: True,
) -> set[str]:
    """Every group's siblings' last attempts' keys, if sealed (in groups that `owns_staging`); every
    attempt of every group checked against `rules`."""
    keys: set[str] = set()
    for where, group in _dicts(state.get("groups"), "groups"):
        if on_group is not None:
            on_group(group, where)
        keeps = owns_staging(group)
        for place, sibling in _dicts(group.get("siblings"), f"{where}.siblings"):
            attempts = list(_dicts(sibling.get("attempts"), f"{place}.attempts"))
            if not attempts:
                raise InventoryError(
                    f"{place}.attempts is empty: NeMo RL's restore refuses a sibling without one"
                )
            for at, attempt in attempts:
                _check_attempt(attempt, rules, budget, at)
                if rules.gate_identity:
                    _check_gate(group, place, sibling, attempt, at)
            last_at, last = attempts[-1]
            if keeps and last["status"] == "sealed":
                keys.update(budget.take(last["staging_keys"], f"{last_at}.staging_keys"))
    return keys


def _check_attempt(attempt: Mapping[str, Any], rules: AttemptRules, budget: KeyBudget, where: str) -> None:
    status = attempt.get("status")
    if status not in rules.statuses:
        raise InventoryError(f"{where}.status is {status!r}, not one of {', '.join(sorted(rules.statuses))}")
    keys = attempt.get("staging_keys")
    if not isinstance(keys, list):
        raise InventoryError(f"{where}.staging_keys is {type(keys).__name__}, not a list of keys")
    receipt = attempt.get("receipt")
    if status == "sealed":
        if receipt is None and not rules.sealed_needs_receipt and not keys:
            return
        if not isinstance(receipt, dict):
            raise InventoryError(f"{where} is sealed without a receipt: NeMo RL's restore refuses it")
        entries = _list(receipt.get("manifest"), f"{where}.receipt.manifest")
        budget.count(len(entries), f"{where}.receipt.manifest")
        manifest = [entry.get("staging_key") if isinstance(entry, dict) else None for entry in entries]
        if manifest != keys:
            raise InventoryError(
                f"{where}.staging_keys differ from its receipt's manifest: NeMo RL's restore refuses it"
            )
    elif keys and status not in rules.keyed_statuses:
        raise InventoryError(
            f"{where} is {status} yet keeps staging keys (only sealed attempts may): NeMo RL's restore "
            "refuses it"
        )


def _check_gate(
    group: Mapping[str, Any], place: str, sibling: Mapping[str, Any], attempt: Mapping[str, Any], at: str
) -> None:
    """NeMo's loaders (schema 2, schema 4's sibling lineage) derive each attempt's gate id,
    `{group_id}_g{generation_index}_a{attempt_uuid hex}` (`-a{gym_attempt}` for a resumed Gym attempt),
    and refuse a sealed receipt naming another ("sealed receipt identity mismatch")."""
    index = place.rsplit("[", 1)[1].rstrip("]")
    if str(sibling.get("generation_index")) != index:
        raise InventoryError(f"{place}.generation_index is not {index}: NeMo RL's restore refuses it")
    raw = attempt.get("attempt_uuid")
    if not isinstance(raw, bytes) or len(raw) != 16:
        raise InventoryError(f"{at}.attempt_uuid is not 16 bytes: NeMo RL's restore refuses it")
    receipt = attempt.get("receipt")
    if attempt.get("status") != "sealed" or not isinstance(receipt, dict):
        return
    gate = f"{group.get('group_id')}_g{index}_a{raw.hex()}"
    gym_attempt = attempt.get("gym_attempt", 0)
    if gym_attempt:
        gate += f"-a{gym_attempt}"
    if receipt.get("rollout_id") != gate:
        raise InventoryError(
            f"{at}: the sealed receipt is another attempt's ({receipt.get('rollout_id')!r}, not {gate!r}): "
            "NeMo RL's restore refuses it"
        )


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InventoryError(f"{where} is {type(value).__name__}, not a list")
    return value


def _dicts(value: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for index, item in enumerate(_list(value, where)):
        if not isinstance(item, dict):
            raise InventoryError(f"{where}[{index}] is {type(item).__name__}, not a dict")
        yield f"{where}[{index}]", item
