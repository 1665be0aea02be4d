"""What sweeps leave in the Redis state store for later readers: the audit log of deleted rows (an intent
entry before each delete batch, a confirmation after), the run summaries and the reference sources' counts.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, cast

from tq_gc.audit import AuditBatch, DeletedRow
from tq_gc.errors import FenceRaised, LeaseLost
from tq_gc.state import redis_scripts as scripts
from tq_gc.state.base import Lease
from tq_gc.state.keys import AUDIT_MAXLEN, AUDIT_PAGE, RUNS_KEPT, Keys
from tq_gc.state.redis_connection import RedisConnection


class RedisAudit:
    """One namespace's audit log, run summaries and source counts."""

    def __init__(self, connection: RedisConnection, keys: Keys, namespace: str) -> None:
        self._connection = connection
        self._keys = keys
        self._namespace = namespace
        register = connection.client.register_script
        self._record_intent = register(scripts.RECORD_INTENT)
        self._confirm_deletes = register(scripts.CONFIRM_DELETES)
        self._record_run = register(scripts.RECORD_RUN)
        self._record_source_counts = register(scripts.RECORD_SOURCE_COUNTS)

    # run summaries and source counts ------------------------------------------------------------

    def record_run(self, report: Mapping[str, Any], lease: Lease | None) -> bool:
        document = json.dumps(report, default=str)
        args: list[str | int] = ["" if lease is None else lease.token, document, RUNS_KEPT]
        with self._connection.guard("record a run"):
            return bool(self._record_run(keys=[self._keys.lease, self._keys.runs], args=args))

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        with self._connection.guard("read recent runs"):
            documents = self._connection.client.lrange(self._keys.runs, 0, limit - 1)
        return [json.loads(document) for document in documents]

    def source_counts(self) -> dict[str, int]:
        with self._connection.guard("read the reference sources' counts"):
            counts = cast(dict[str, str], self._connection.client.hgetall(self._keys.source_counts))
        return {source: int(count) for source, count in counts.items()}

    def source_baseline_since_ms(self) -> int | None:
        with self._connection.guard("read since when the sources' counts are kept"):
            since = cast(str | None, self._connection.client.get(self._keys.source_counts_since))
        return None if since is None else int(since)

    def record_source_counts(self, lease: Lease, counts: Mapping[str, int]) -> None:
        args: list[str | int] = [lease.token, *(item for pair in counts.items() for item in pair)]
        keys = [self._keys.lease, self._keys.source_counts, self._keys.source_counts_since]
        with self._connection.guard("record the reference sources' counts"):
            done = self._record_source_counts(keys=keys, args=args)
        if not done:
            raise LeaseLost(self._namespace)

    # the audit log ------------------------------------------------------------------------------

    def record_intent(self, lease: Lease, batch: AuditBatch, fence_epoch: int, ttl_ms: int) -> str:
        rows = json.dumps(
            {
                "keys": batch.keys,
                "unreferenced_ms": batch.unreferenced_ms,
                "global_indexes": batch.global_indexes,
                "tags_digests": batch.tags_digests,
            }
        )
        keys = [
            self._keys.lease,
            self._keys.audit,
            self._keys.fences,
            self._keys.fence_epoch,
            self._keys.deleting,
        ]
        args: list[str | int] = [
            lease.token, AUDIT_MAXLEN, batch.run_id, batch.partition, len(batch), rows, fence_epoch, ttl_ms,
        ]  # fmt: skip
        with self._connection.guard("record the rows about to be deleted"):
            intent_id = self._record_intent(keys=keys, args=args)
        if intent_id == 0:
            raise LeaseLost(self._namespace)
        if intent_id == -1:
            raise FenceRaised(self._namespace)
        self._connection.replicated("record the rows about to be deleted")
        return str(intent_id)

    def confirm_deletes(
        self, lease: Lease, intent_id: str, batch: AuditBatch, deleted: Collection[str], forget: Iterable[str]
    ) -> None:
        saved = json.dumps([key for key in batch.keys if key not in deleted])
        keys = [
            self._keys.lease,
            self._keys.audit,
            self._keys.first_seen_tombstones(batch.partition),
            self._keys.deleting,
        ]
        tombstone = json.dumps(list(forget), separators=(",", ":"))
        with self._connection.guard("confirm deleted rows"):
            done = self._confirm_deletes(keys=keys, args=[lease.token, intent_id, saved, tombstone])
        if not done:
            raise LeaseLost(self._namespace)

    def read_audit(self, run_id: str | None, limit: int) -> list[DeletedRow]:
        found: list[DeletedRow] = []
        saved_by_intent: dict[str, list[str]] = {}  # confirmations are newer than their intents
        newest = "+"
        with self._connection.guard("read the audit log"):
            while len(found) < limit:
                page = cast(
                    list[tuple[str, dict[str, str]]],
                    self._connection.client.xrevrange(
                        self._keys.audit, max=newest, min="-", count=AUDIT_PAGE
                    ),
                )
                for entry_id, fields in page:
                    if "confirms" in fields:
                        saved_by_intent[fields["confirms"]] = json.loads(fields["saved"])
                    elif run_id is None or fields.get("run_id") == run_id:
                        rows = _decode_audit(fields, saved_by_intent.pop(entry_id, None))
                        found.extend(reversed(rows))
                if len(page) < AUDIT_PAGE:
                    break
                newest = "(" + page[-1][0]  # exclusive: continue below the oldest entry seen
        return found[: max(limit, 0)]


def _decode_audit(fields: Mapping[str, str], saved: list[str] | None) -> list[DeletedRow]:
    """The rows of one intent entry, in the batch's order: those deleted if a confirmation (naming the
    rows `saved`) was found, all of them, unconfirmed, if not."""
    columns = json.loads(fields["rows"])
    batch = AuditBatch(
        run_id=fields["run_id"],
        partition=fields["partition"],
        keys=tuple(columns["keys"]),
        unreferenced_ms=tuple(columns["unreferenced_ms"]),
        global_indexes=tuple(columns["global_indexes"]),
        tags_digests=tuple(columns["tags_digests"]),
    )
    if saved is not None:
        batch = batch.confirm(set(batch.keys).difference(saved))
    return batch.rows()
