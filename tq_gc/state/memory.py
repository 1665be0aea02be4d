"""The embedded state store (`memory://`): one process, one lock, same caps as Redis."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from tq_gc.audit import AuditBatch, DeletedRow
from tq_gc.errors import FenceRaised, LeaseLost
from tq_gc.first_seen import FirstSeen, FirstSeenRecords
from tq_gc.state.base import AdmissionRows, Lease, Recheck, copied_admissions, new_version
from tq_gc.state.keys import AUDIT_MAXLEN, RUNS_KEPT, check_namespace

_NEVER = 2**63


class SteadyClock:
    """Wall-clock milliseconds read once, then advanced by the monotonic clock.

    The store's clock must not jump: an NTP step forward of the host's wall clock would age every
    first-seen record and lease at once (and a step back would make leases outlive their TTL)."""

    def __init__(self) -> None:
        self._origin_ms = time.time_ns() // 1_000_000
        self._origin_ns = time.monotonic_ns()

    def __call__(self) -> int:
        return self._origin_ms + (time.monotonic_ns() - self._origin_ns) // 1_000_000


class MemoryState:
    def __init__(self, namespace: str = "default", clock_ms: Callable[[], int] | None = None) -> None:
        self.namespace = check_namespace(namespace)
        self.clock_ms = clock_ms or SteadyClock()
        self._lock = threading.Lock()
        self._first_seen: dict[str, FirstSeenRecords] = {}
        self._observed: dict[str, int] = {}
        self._lease: Lease | None = None
        self._runs: deque[str] = deque(maxlen=RUNS_KEPT)
        self._source_counts: dict[str, int] = {}
        self._source_counts_since_ms: int | None = None  # when the first counts were recorded
        self._audit: deque[tuple[str, AuditBatch]] = deque()  # (intent id, batch), oldest first
        self._audit_rows = 0
        self._intents = 0
        self._fence_epoch = 0
        self._deleting: tuple[str, int] | None = None  # (lease token, expires_at_ms) of a batch in flight
        # id -> (expires_at_ms, rows); expired entries are pruned on read
        self._admissions: dict[str, tuple[int, AdmissionRows]] = {}
        self._admissions_checked_until = _NEVER  # no admission expires before this (store clock, ms)
        self._fences: dict[str, int] = {}
        self._admissions_version = 0
        self._barrier: dict[str, set[str]] = {}  # partition -> keys admitted since the lease was taken
        self._server_run = secrets.token_hex(8)  # this store lives and dies with its process
        self._store_id = f"memory-{secrets.token_hex(16)}"

    def __repr__(self) -> str:
        return f"MemoryState(namespace={self.namespace!r})"

    def store_id(self) -> str:
        return self._store_id

    def now_ms(self) -> int:
        return self.clock_ms()

    def load_first_seen(self, partition: str) -> FirstSeenRecords:
        with self._lock:
            records = self._first_seen.get(partition)
            return FirstSeenRecords() if records is None else records.copy()

    def observed(self) -> dict[str, int]:
        with self._lock:
            return dict(self._observed)

    def save_first_seen(
        self,
        lease: Lease,
        partition: str,
        upserts: Mapping[str, FirstSeen],
        drops: Iterable[str],
        observed_ms: int,
    ) -> None:
        with self._lock:
            self._check_lease(lease)
            self._first_seen.setdefault(partition, FirstSeenRecords()).update(upserts)
            self._forget_first_seen(partition, drops)
            self._observed[partition] = observed_ms

    def forget_partition(self, lease: Lease, partition: str) -> None:
        with self._lock:
            self._check_lease(lease)
            self._first_seen.pop(partition, None)
            self._observed.pop(partition, None)

    def _forget_first_seen(self, partition: str, keys: Iterable[str]) -> None:
        records = self._first_seen.get(partition)
        if records is None:
            return
        records.discard(keys)
        if not records:
            self._first_seen.pop(partition, None)

    def _check_lease(self, lease: Lease) -> None:
        """Under the lock: the write that follows is ours to make, or LeaseLost."""
        current = self._live_lease(self.clock_ms())
        if current is None or current.token != lease.token:
            raise LeaseLost(self.namespace)

    def acquire_lease(self, holder: str, ttl_ms: int) -> Lease | None:
        with self._lock:
            now = self.clock_ms()
            if self._live_lease(now) is not None:
                return None
            self._lease = Lease(secrets.token_hex(16), holder, now + ttl_ms)
            self._barrier = {}
            return self._lease

    def _renew_lease(self, lease: Lease, ttl_ms: int) -> Lease | None:
        with self._lock:
            now = self.clock_ms()
            current = self._live_lease(now)
            if current is None or current.token != lease.token:
                return None
            self._lease = Lease(current.token, current.holder, now + ttl_ms)
            return self._lease

    def release_lease(self, lease: Lease) -> None:
        with self._lock:
            if self._lease is not None and self._lease.token == lease.token:
                self._lease = None
                self._barrier = {}

    def lease_holder(self) -> Lease | None:
        with self._lock:
            return self._live_lease(self.clock_ms())

    def recheck(self, lease: Lease, ttl_ms: int) -> Recheck:
        renewed = self._renew_lease(lease, ttl_ms)
        fences = self.live_fences()
        with self._lock:
            if renewed is not None and self._deleting is not None and self._deleting[0] == lease.token:
                self._deleting = (lease.token, self.clock_ms() + ttl_ms)  # a slow clear stays in flight
            return Recheck(renewed, fences, self._admissions_version, self._fence_epoch, self._server_run)

    def _live_lease(self, now: int) -> Lease | None:
        if self._lease is not None and self._lease.expires_at_ms <= now:
            self._lease = None
        return self._lease

    def record_run(self, report: Mapping[str, Any], lease: Lease | None = None) -> bool:
        # Stored as JSON, like Redis: a caller mutating its report later cannot rewrite history.
        document = json.dumps(report, default=str)
        with self._lock:
            if lease is not None:
                try:
                    self._check_lease(lease)
                except LeaseLost:
                    return False
            self._runs.appendleft(document)
            return True

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            documents = list(self._runs)[: max(limit, 0)]
        return [json.loads(document) for document in documents]

    def source_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._source_counts)

    def source_baseline_since_ms(self) -> int | None:
        with self._lock:
            return self._source_counts_since_ms

    def record_source_counts(self, lease: Lease, counts: Mapping[str, int]) -> None:
        with self._lock:
            self._check_lease(lease)
            self._source_counts = dict(counts)
            if self._source_counts_since_ms is None:
                self._source_counts_since_ms = self.clock_ms()

    def record_intent(self, lease: Lease, batch: AuditBatch, fence_epoch: int, ttl_ms: int) -> str:
        with self._lock:
            self._check_lease(lease)
            now = self.clock_ms()
            self._prune(now)
            if self._fences or self._fence_epoch != fence_epoch:
                raise FenceRaised(self.namespace)
            self._intents += 1
            intent_id = str(self._intents)
            self._audit.append((intent_id, batch))
            self._audit_rows += len(batch)
            # Never this run's own batches: a run may delete more rows than the cap.
            while self._audit_rows - len(self._audit[0][1]) >= AUDIT_MAXLEN and (
                self._audit[0][1].run_id != batch.run_id
            ):
                self._audit_rows -= len(self._audit.popleft()[1])
            self._deleting = (lease.token, now + ttl_ms)
            return intent_id

    def confirm_deletes(
        self, lease: Lease, intent_id: str, batch: AuditBatch, deleted: Collection[str], forget: Iterable[str]
    ) -> None:
        with self._lock:
            self._check_lease(lease)
            for position, (entry_id, intent) in enumerate(self._audit):
                if entry_id == intent_id:
                    # Trimming still counts the intent's rows: the log keeps at least AUDIT_MAXLEN.
                    self._audit[position] = (entry_id, intent.confirm(deleted))
                    break
            self._forget_first_seen(batch.partition, forget)
            if self._deleting is not None and self._deleting[0] == lease.token:
                self._deleting = None

    def read_audit(self, run_id: str | None, limit: int) -> list[DeletedRow]:
        found: list[DeletedRow] = []
        with self._lock:
            batches = [b for _, b in reversed(self._audit) if run_id is None or b.run_id == run_id]
        for batch in batches:
            if len(found) >= limit:
                break
            found.extend(reversed(batch.rows()))
        return found[: max(limit, 0)]

    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        copied = {partition: list(keys) for partition, keys in rows.items()}
        with self._lock:
            expires_at_ms = self.clock_ms() + ttl_ms
            self._admissions[admission_id] = (expires_at_ms, copied)
            self._admissions_checked_until = min(self._admissions_checked_until, expires_at_ms)
            self._admissions_version = new_version()
            if self._live_lease(self.clock_ms()) is not None:
                for partition, keys in copied.items():
                    self._barrier.setdefault(partition, set()).update(keys)

    def renew_admission(self, admission_id: str, ttl_ms: int) -> bool:
        with self._lock:
            now = self.clock_ms()
            self._prune(now)
            if admission_id not in self._admissions:
                return False
            rows = self._admissions[admission_id][1]
            self._admissions[admission_id] = (now + ttl_ms, rows)
            self._admissions_checked_until = min(self._admissions_checked_until, now + ttl_ms)
            return True

    def release_admission(self, admission_id: str) -> None:
        with self._lock:
            self._admissions.pop(admission_id, None)

    def live_admissions(self) -> dict[str, AdmissionRows]:
        return copied_admissions(self.live_admission_rows())

    def live_admission_rows(self) -> dict[str, AdmissionRows]:
        # An admission's rows are a copy made when it was admitted, replaced (never changed) by another
        # admit.
        with self._lock:
            self._prune(self.clock_ms())
            return {admission_id: rows for admission_id, (_, rows) in self._admissions.items()}

    def admission_expiries(self) -> dict[str, int]:
        with self._lock:
            self._prune(self.clock_ms())
            return {
                admission_id: expires_at_ms for admission_id, (expires_at_ms, _) in self._admissions.items()
            }

    def admitted_since_lease(self, lease: Lease, partition: str, keys: Collection[str]) -> set[str]:
        with self._lock:
            self._check_lease(lease)
            barrier = self._barrier.get(partition, set())
            return {key for key in keys if key in barrier}

    def admissions_version(self) -> int:
        with self._lock:
            return self._admissions_version

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        with self._lock:
            self._fence_epoch += 1
            expires_at_ms = self.clock_ms() + ttl_ms
            # Never shorten a fence someone else raised under the same name (ZADD GT in Redis).
            self._fences[name] = max(expires_at_ms, self._fences.get(name, expires_at_ms))

    def lower_fence(self, name: str) -> None:
        with self._lock:
            self._fences.pop(name, None)

    def live_fences(self) -> dict[str, int]:
        with self._lock:
            now = self.clock_ms()
            return {name: expires for name, expires in self._fences.items() if expires > now}

    def delete_in_flight(self) -> bool:
        with self._lock:
            return self._deleting is not None and self._deleting[1] > self.clock_ms()

    def _prune(self, now: int) -> None:
        """Forget expired admissions and fences. Expired means expires_at_ms <= now, as in Redis. The
        admissions are scanned only once the earliest expiry may have passed: a sweep re-checks before
        every delete batch, and a job may hold ten thousand admissions."""
        if now >= self._admissions_checked_until:
            for admission_id in [a for a, (expires, _) in self._admissions.items() if expires <= now]:
                del self._admissions[admission_id]
            self._admissions_checked_until = min((e for e, _ in self._admissions.values()), default=_NEVER)
        for name in [n for n, expires in self._fences.items() if expires <= now]:
            del self._fences[name]

    def close(self) -> None:
        """Nothing to release: the state lives and dies with this object."""
