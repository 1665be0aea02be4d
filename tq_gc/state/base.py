"""The state store: everything tq-gc remembers between sweeps, and the clock it trusts.

One interface, two implementations run against one contract suite (tests/contract/test_state_store.py):
`memory://` (embedded default, one process) and `redis://` / `rediss://` / `unix://` (shared by the
sidecar, the CronJob and the CLI). Times are milliseconds on the store's own clock (Redis `TIME`), never
the host's: a collector whose host clock is off must not shorten anyone's grace.

Every method raises StoreUnavailable when the store cannot answer.

Ownership: only the lease holder writes first-seen records, the audit log and its own run summary, and
every such write takes the lease and checks its token in the same atomic step (a Lua script on Redis,
the store's lock in memory). A sweeper paused past its lease's TTL and resumed therefore writes nothing:
its writes raise LeaseLost. The check cannot be a separate read before the write: the lease could pass to
another sweeper in between, and the stale sweeper would overwrite the new holder's observations.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tq_gc.audit import AuditBatch, DeletedRow
from tq_gc.first_seen import FirstSeen, FirstSeenRecords

AdmissionRows = dict[str, list[str]]


def new_version() -> int:
    """A fresh admissions version (StateStore.admissions_version): 62 random bits, never 0."""
    return secrets.randbits(62) | 1


def copied_admissions(live: dict[str, AdmissionRows]) -> dict[str, AdmissionRows]:
    """{admission id: rows} with every list of keys copied: the caller's to change."""
    return {
        admission_id: {partition: list(keys) for partition, keys in rows.items()}
        for admission_id, rows in live.items()
    }


@dataclass(frozen=True, slots=True)
class Lease:
    token: str
    holder: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class Recheck:
    """What the collector must know right before each delete batch (docs/safety.md, rule 6), read in
    one call."""

    lease: Lease | None  # renewed, or None: lost, the sweeper must stop
    fences: dict[str, int]  # fences up now: {name: expires_at_ms}
    admissions_version: int
    # Moves on every raise_fence: a fence raised and lowered between two re-checks still moves it.
    fence_epoch: int
    # The server process that answered ("" when it will not say): another one mid-sweep means the store
    # restarted or failed over, and whatever publishers did while it was away is in no write barrier.
    server_run: str = ""


class AdmissionStore(Protocol):
    """The admission registry and checkpoint fences as publishers write them, leases on the store's clock:
    what tq_gc.publish.registry.AdmissionRegistry writes through (a StateStore, or the sidecar's adapter
    tq_gc.sidecar.client.SidecarAdmissionBackend)."""

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
        """Every admission not yet expired: {admission_id: {partition: [keys]}}. A complete snapshot,
        the caller's to change."""
        ...

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        """Put up (or extend) a named checkpoint fence, and move the fence epoch."""
        ...

    def lower_fence(self, name: str) -> None:
        """Take a fence down; a no-op if unknown."""
        ...

    def live_fences(self) -> dict[str, int]:
        """Fences up now: {name: expires_at_ms}."""
        ...

    def delete_in_flight(self) -> bool:
        """Whether a sweeper is between an intent and its confirmation (a clear may be under way)."""
        ...


class AdmissionSnapshots(Protocol):
    """What the collector reads of the registry (tq_gc.references.admissions): snapshots, and a version
    to tell when one is stale."""

    def live_admission_rows(self) -> dict[str, AdmissionRows]:
        """The snapshot live_admissions gives, its rows the store's own: to read, never to change (the
        collector reads it every sweep; at 1M rows copying 10,000 admissions' rows took up to ~100 ms,
        most of it the garbage collector's)."""
        ...

    def admissions_version(self) -> int:
        """A token that changes whenever an admission is recorded or replaced (0 before the first): a
        random number, not a counter, so that a Redis that lost writes in a failover and took as many
        new ones cannot show a version a reader already saw with other admissions behind it.

        While it stands still no row has gained protection (releases and expiries only take it away),
        so a reader may keep using a snapshot it read at the same version: that is how the collector
        re-checks admissions before every delete batch without re-reading them all.
        """
        ...


class StateStore(AdmissionStore, AdmissionSnapshots, Protocol):
    namespace: str

    def admission_expiries(self) -> dict[str, int]:
        """When each live admission expires, {admission_id: expires_at_ms} on the store's clock (what
        `tq-gc admissions` shows beside the rows)."""
        ...

    def store_id(self) -> str:
        """Which store this is, whatever address reached it: two sweepers share a store exactly when
        their ids are equal. A random id written once into the store (Redis: SET NX) and read back by
        everyone; each memory:// store has its own. A store restarted empty has a new one."""
        ...

    def now_ms(self) -> int:
        """The store's clock, in ms since the epoch."""
        ...

    # first-seen-unreferenced times; only the lease holder writes them
    def load_first_seen(self, partition: str) -> FirstSeenRecords:
        """Every first-seen record of a partition: {key: FirstSeen}, held column-wise."""
        ...

    def observed(self) -> dict[str, int]:
        """{partition: store time (ms) of the last sweep that observed it}: every partition with records.

        Grace accrues only while sweeps observe a row: a partition whose last observation is older than
        the grace, or that has left the scope, has its records forgotten (plan.stale_partitions)."""
        ...

    def save_first_seen(
        self,
        lease: Lease,
        partition: str,
        upserts: Mapping[str, FirstSeen],
        drops: Iterable[str],
        observed_ms: int,
    ) -> None:
        """Write new or changed records, drop the given keys (referenced again, or gone), and mark the
        partition observed at `observed_ms`. Raises LeaseLost, writing nothing, if the lease is not ours."""
        ...

    def forget_partition(self, lease: Lease, partition: str) -> None:
        """Drop every record of a partition and its observation mark. Raises LeaseLost if not ours."""
        ...

    # the sweep lease, shared by every sweeper of the namespace
    def acquire_lease(self, holder: str, ttl_ms: int) -> Lease | None:
        """Take the lease if nobody holds it (atomically); None when someone else does. Taking it
        starts the admission barrier afresh (admitted_since_lease)."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease back if it is still ours; a no-op otherwise."""
        ...

    def lease_holder(self) -> Lease | None:
        """Who holds the lease now, or None."""
        ...

    def recheck(self, lease: Lease, ttl_ms: int) -> Recheck:
        """Extend our lease if it is still ours (token check, atomically; lease None if it was lost),
        and our delete in flight with it (a clear slower than the TTL stays marked while its sweeper
        renews), and read live fences, the admissions version and the fence epoch: one round trip,
        before every delete batch and through long listings."""
        ...

    # run summaries and the audit log
    def record_run(self, report: Mapping[str, Any], lease: Lease | None = None) -> bool:
        """Keep a run summary (the report document); the store keeps a bounded number.

        With `lease`, only while that lease is still ours (a sweeper that lost it writes nothing): False
        when it was not written. Without, always (a sweep skipped before it held a lease)."""
        ...

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        """The newest run summaries, newest first."""
        ...

    def source_counts(self) -> dict[str, int]:
        """{reference source id: references it yielded} as of the last sweep that read every source (and
        recorded them); {} before any."""
        ...

    def source_baseline_since_ms(self) -> int | None:
        """Store time (ms) of the first recorded source counts, kept from then on; None before any (a
        new store, or one restarted empty: it has lost the baseline it had)."""
        ...

    def record_source_counts(self, lease: Lease, counts: Mapping[str, int]) -> None:
        """Replace the recorded counts with `counts`. Raises LeaseLost, writing nothing, if not ours."""
        ...

    def record_intent(self, lease: Lease, batch: AuditBatch, fence_epoch: int, ttl_ms: int) -> str:
        """Append a batch about to be deleted to the audit log, unconfirmed, and mark a delete in flight
        (for ttl_ms, or until confirm_deletes); durable on return. Returns the intent's id.

        Refused, writing nothing, when the lease is not ours (LeaseLost) or when a fence is up or the
        fence epoch is no longer `fence_epoch` (FenceRaised): checked in the same atomic step, so a
        fence raised after this returns finds the delete in flight (delete_in_flight) and waits for it.
        The log is capped: the oldest batches go once the newer ones hold AUDIT_MAXLEN rows, never a
        batch of the same run (a run may delete more rows than the cap)."""
        ...

    def confirm_deletes(
        self, lease: Lease, intent_id: str, batch: AuditBatch, deleted: Collection[str], forget: Iterable[str]
    ) -> None:
        """Confirm the intent `intent_id` (of `batch`) with the keys actually deleted (the others were
        saved by the re-check), drop the first-seen records of `forget` in its partition and clear the
        in-flight mark, together. Raises LeaseLost, writing nothing, if the lease is not ours: the intent
        then stays in the log, unconfirmed, and the mark expires by itself."""
        ...

    def read_audit(self, run_id: str | None, limit: int) -> list[DeletedRow]:
        """Deleted rows, newest first; only those of run_id when given. Rows of an intent never
        confirmed are all there, with confirmed=False: they may or may not have been deleted."""
        ...

    # the write barrier of the admission registry (its reads and writes: AdmissionSnapshots, AdmissionStore)
    def admitted_since_lease(self, lease: Lease, partition: str, keys: Collection[str]) -> set[str]:
        """The write barrier: which of `keys` (in `partition`) an admission named since `lease` was
        taken, released or expired since or not. Raises LeaseLost if the lease is not ours (another
        sweeper's lease starts another barrier).

        Every admit made while a sweeper holds the lease records its keys, in the same atomic step. A
        reference that moves by the protocol (admit, write the new reference, remove the old, release)
        passes through an admission each time it moves, so a sweep that checks this right before each
        delete batch keeps every row whose reference moved since the sweep began, however often it
        moved and whichever sources it moved between; a reference that did not move is where the
        sweep's reads found it."""
        ...

    def close(self) -> None:
        """Release connections this store opened (never ones it was handed)."""
        ...
