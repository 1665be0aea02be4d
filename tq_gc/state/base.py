"""The state store: everything tq-gc remembers between sweeps, and the clock it trusts.

One interface, two implementations run against one contract suite (tests/unit/test_state_contract.py):
`memory://` (embedded default, one process) and `redis://` / `rediss://` / `unix://` (shared by the
sidecar, the CronJob and the CLI). Times are milliseconds on the store's own clock (Redis `TIME`), never
the host's: a collector whose host clock is off must not shorten anyone's grace.

Every method raises StoreUnavailable when the store cannot answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tq_gc.model import AuditBatch, DeletedRow, FirstSeen

AdmissionRows = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class Lease:
    token: str
    holder: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class Recheck:
    """What the collector must know right before each delete batch (rule 5), read in one call."""

    lease: Lease | None  # renewed, or None: lost, the sweeper must stop
    fences: dict[str, int]  # fences up now: {name: expires_at_ms}
    admissions_version: int


class StateStore(Protocol):
    namespace: str

    def now_ms(self) -> int:
        """The store's clock, in ms since the epoch."""
        ...

    # first-seen-unreferenced times; only the lease holder writes them
    def load_first_seen(self, partition: str) -> dict[str, FirstSeen]:
        """Every first-seen record of a partition: {key: FirstSeen}."""
        ...

    def save_first_seen(self, partition: str, upserts: Mapping[str, FirstSeen], drops: Iterable[str]) -> None:
        """Write new or changed records and drop the given keys (referenced again, or gone)."""
        ...

    # the sweep lease, shared by every sweeper of the namespace
    def acquire_lease(self, holder: str, ttl_ms: int) -> Lease | None:
        """Take the lease if nobody holds it (atomically); None when someone else does."""
        ...

    def renew_lease(self, lease: Lease, ttl_ms: int) -> Lease | None:
        """Extend our lease if it is still ours (token check, atomically); None if it was lost."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease back if it is still ours; a no-op otherwise."""
        ...

    def lease_holder(self) -> Lease | None:
        """Who holds the lease now, or None."""
        ...

    def recheck(self, lease: Lease, ttl_ms: int) -> Recheck:
        """renew_lease, live_fences and admissions_version together: one round trip per delete batch."""
        ...

    # run summaries and the audit log
    def record_run(self, report: Mapping[str, Any]) -> None:
        """Keep a run summary (the report document); the store keeps a bounded number."""
        ...

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        """The newest run summaries, newest first."""
        ...

    def record_deletes(self, batch: AuditBatch) -> None:
        """Append a deleted batch to the audit log and drop the rows' first-seen records, together.

        The log is capped: the oldest batches go once the newer ones hold AUDIT_MAXLEN rows."""
        ...

    def read_audit(self, run_id: str | None, limit: int) -> list[DeletedRow]:
        """Deleted rows, newest first; only those of run_id when given."""
        ...

    # the admission registry and checkpoint fences; leases expire on the store's clock
    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        """Record (or replace) a live admission; durable on return."""
        ...

    def renew_admission(self, admission_id: str, ttl_ms: int) -> bool:
        """Extend a live admission; False if it is unknown or already expired."""
        ...

    def release_admission(self, admission_id: str) -> None:
        """Drop an admission; a no-op if unknown."""
        ...

    def live_admissions(self) -> dict[str, AdmissionRows]:
        """Every admission not yet expired: {admission_id: {partition: [keys]}}. A complete snapshot."""
        ...

    def admissions_version(self) -> int:
        """A counter that moves whenever an admission is recorded or replaced.

        While it stands still no row has gained protection (releases and expiries only take it away),
        so a reader may keep using a snapshot it read at the same version: that is how the collector
        re-checks admissions before every delete batch without re-reading them all.
        """
        ...

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        """Put up (or extend) a named checkpoint fence."""
        ...

    def lower_fence(self, name: str) -> None:
        """Take a fence down; a no-op if unknown."""
        ...

    def live_fences(self) -> dict[str, int]:
        """Fences up now: {name: expires_at_ms}."""
        ...

    def close(self) -> None:
        """Release connections this store opened (never ones it was handed)."""
        ...
