"""The rows a replay index (`replay_buffer_metadata.pt`, schema 1) makes NeMo RL's restore keep.

Written beside `rollout_recovery.pt` when the data-plane checkpoint is authoritative (its metadata then
records `replay_manifest_digest` and `replay_group_count`): `{schema_version, storage, partition_id,
saved_capacity, manifest_digest, groups: [{meta: KVBatchMeta, start_weight, end_weight, target_step,
group_id}]}`. A restore requires every group's canonical rows (`meta.sample_ids` in `meta.partition_id`)
and keeps, in staging, each row tag's route plan's `cleanup_staging_keys` (tag `route_assembly_plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError
from tq_gc.references.nemo_rl.ledger import LedgerRows
from tq_gc.references.nemo_rl.torchfile import KVBatchMetaRecord

FILE = "replay_buffer_metadata.pt"
VERSION = 1
ROUTE_PLAN_TAG = "route_assembly_plan"
_PLAN_FIELDS = frozenset(
    {"schema_version", "staging_partition", "spans", "cleanup_staging_keys", "expected_token_length"}
)
_SPAN_V1 = frozenset({"staging_key", "carry_len", "generation_len", "staged_route_len"})
_SPAN_FIELDS = {1: _SPAN_V1, 2: _SPAN_V1 | {"extras_digest_version", "extras_digest"}}


def rows(state: Any, metadata: Mapping[str, Any], budget: KeyBudget) -> LedgerRows:
    """The replay index's rows, after checking it is the one the data-plane metadata recorded."""
    if not isinstance(state, dict):
        raise InventoryError(f"{FILE} holds {type(state).__name__}, not the replay index's dict")
    version = state.get("schema_version")
    if type(version) is not int or version != VERSION:
        raise InventoryError(f"{FILE}: schema_version is {version!r}; this reader knows version {VERSION}")
    recorded = metadata.get("replay_manifest_digest")
    if state.get("manifest_digest") != recorded:
        raise InventoryError(
            f"{FILE}: manifest_digest is {state.get('manifest_digest')!r}, but data_plane/metadata.json "
            f"records {recorded!r}: not the replay index this checkpoint committed"
        )
    groups = state.get("groups")
    if not isinstance(groups, list):
        raise InventoryError(f"{FILE}: groups is {type(groups).__name__}, not a list")
    count = metadata.get("replay_group_count")
    if count is not None and count != len(groups):
        raise InventoryError(f"{FILE} holds {len(groups)} groups, data_plane/metadata.json records {count}")
    found = LedgerRows()
    for index, group in enumerate(groups):
        meta = group.get("meta") if isinstance(group, dict) else None
        if not isinstance(meta, KVBatchMetaRecord):
            raise InventoryError(f"{FILE}: groups[{index}].meta is {type(meta).__name__}, not a KVBatchMeta")
        _add_group(meta, found, budget, f"{FILE} groups[{index}].meta")
    return found


def _add_group(meta: KVBatchMetaRecord, found: LedgerRows, budget: KeyBudget, where: str) -> None:
    partition = meta.get("partition_id")
    if not isinstance(partition, str) or not partition:
        raise InventoryError(f"{where}.partition_id is {partition!r}, not a partition name")
    found.canonical.setdefault(partition, set()).update(
        budget.take(meta.get("sample_ids"), f"{where}.sample_ids")
    )
    route_plan_keys(meta.get("tags"), found, budget, where)


def route_plan_keys(tags: Any, found: LedgerRows, budget: KeyBudget, where: str) -> None:
    """Add to `found` the `cleanup_staging_keys` of every route plan in a KVBatchMeta's `tags`."""
    if tags is None:
        return
    if not isinstance(tags, list):
        raise InventoryError(f"{where}.tags is {type(tags).__name__}, not a list")
    for index, tag in enumerate(tags):
        if not isinstance(tag, dict):  # a tag may carry a route plan: what is not a dict cannot be read
            raise InventoryError(f"{where}.tags[{index}] is {type(tag).__name__}, not a dict of tags")
        plan = tag.get(ROUTE_PLAN_TAG)
        if plan is None:
            continue
        if not isinstance(plan, dict):
            raise InventoryError(
                f"{where}.tags[{index}].{ROUTE_PLAN_TAG} is {type(plan).__name__}, not a route plan"
            )
        _check_decodes(plan, f"{where}.tags[{index}].{ROUTE_PLAN_TAG}")
        partition = plan.get("staging_partition")
        if partition is not None and not isinstance(partition, str):
            raise InventoryError(f"{where}.tags[{index}].{ROUTE_PLAN_TAG}.staging_partition is not a name")
        if partition is not None:
            found.named_partitions.add(partition)
        cleanup = plan.get("cleanup_staging_keys")
        found.staging_keys.update(
            budget.take(cleanup, f"{where}.tags[{index}].{ROUTE_PLAN_TAG}.cleanup_staging_keys")
        )


def _check_decodes(plan: Mapping[str, Any], where: str) -> None:
    """InventoryError unless `plan` has the shape of a route plan NeMo's `decode_route_plan` reads
    (nemo_rl/experience/route_plan.py: exactly these fields, its spans exactly their version's; at
    9355cc54 lines 179-260 for version 2; version 1 on the earlier branches, such as
    amahishi/partial-rollout-periodic-refresh, has no extras digest in its spans). NeMo's restore decodes
    every plan it keeps (rollout_recovery.py line 330, replay_buffer.py line 1118 at 9355cc54) and stops
    on one it refuses; the two versions are told apart by `schema_version` and the spans' fields, and a
    plan matching neither is refused."""
    version = plan.get("schema_version")
    spans = plan.get("spans")
    span_fields = _SPAN_FIELDS.get(version) if type(version) is int else None
    if span_fields is None:
        raise InventoryError(
            f"{where}: schema_version is {version!r}; this reader knows route plan versions 1 and 2"
        )
    if set(plan) != _PLAN_FIELDS or not isinstance(spans, list):
        raise InventoryError(f"{where}: has the fields {sorted(plan)}, not those of a route plan")
    for number, span in enumerate(spans):
        if not isinstance(span, dict) or set(span) != span_fields:
            raise InventoryError(f"{where}.spans[{number}] is not a version-{version} route span")
