"""One sweep: lease -> fence -> list -> references -> plan -> (re-check -> delete)* -> report.

The imperative shell around plan.py. Each step is a short method; every I/O failure ends the sweep
with nothing more deleted, and the run is recorded whatever its outcome.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby

from tq_gc.config import Config
from tq_gc.errors import LeaseLost, ReferenceSourceError, StoreUnavailable
from tq_gc.model import (
    DELETED_SAMPLE_SIZE,
    DeletedRow,
    FirstSeen,
    Observation,
    Outcome,
    References,
    RowId,
    SweepReport,
    Tags,
    tags_digest,
)
from tq_gc.plan import Plan, PlanPolicy, plan
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.references.manifests import ManifestsSource
from tq_gc.references.tags import TagsSource
from tq_gc.state.base import Lease, StateStore
from tq_gc.stores.base import RowStore

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
Listing = dict[str, dict[str, Tags]]


class SweepStopped(Exception):
    """Ends a sweep early with an outcome: skipped (lease held, fence up) or aborted (fail closed)."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Batch:
    partition: str
    rows: tuple[RowId, ...]


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Collector:
    def __init__(self, config: Config, state: StateStore, row_store: RowStore, holder: str | None = None):
        self.config = config
        self.state = state
        self.row_store = row_store
        self.holder = holder or default_holder()
        self.admissions = AdmissionsSource(state, expect_nonempty=config.admissions.expect_nonempty)
        self.manifests = ManifestsSource(config.manifests)
        self.tags = TagsSource(config.tag_references, row_store)
        self._lease_ttl_ms = int(config.lease_ttl_seconds * 1000)

    def sweep(
        self, *, dry_run: bool = True, max_deletes: int | None = None, progress: Progress | None = None
    ) -> SweepReport:
        report = SweepReport(run_id=uuid.uuid4().hex[:16], namespace=self.config.namespace, dry_run=dry_run)
        report.started_at = _iso_now()
        lease: Lease | None = None
        try:
            with self._phase(report, "lease"):
                lease = self._take_lease()
                self._check_fences()
            result, first_seen = self._mark(report, PlanPolicy.from_config(self.config, max_deletes))
            if dry_run:
                report.outcome = Outcome.DRY_RUN
            else:
                with self._phase(report, "delete"):
                    lease = self._delete(report, result, first_seen, lease, progress)
        except SweepStopped as stop:
            report.outcome, report.reason = stop.outcome, stop.reason
        except (StoreUnavailable, LeaseLost, ReferenceSourceError) as exc:
            report.outcome, report.reason = Outcome.ABORTED, str(exc)
        finally:
            report.finished_at = _iso_now()
            self._finish(report, lease)
        return report

    # -- steps ------------------------------------------------------------------------------

    def _take_lease(self) -> Lease:
        lease = self.state.acquire_lease(self.holder, self._lease_ttl_ms)
        if lease is None:
            holder = self.state.lease_holder()
            who = holder.holder if holder else "another sweeper"
            raise SweepStopped(Outcome.SKIPPED, f"lease held by {who}")
        return lease

    def _check_fences(self) -> None:
        fences = self.state.live_fences()
        if fences:
            raise SweepStopped(Outcome.SKIPPED, f"checkpoint fence up: {', '.join(sorted(fences))}")

    def _mark(self, report: SweepReport, policy: PlanPolicy) -> tuple[Plan, dict[RowId, FirstSeen]]:
        with self._phase(report, "list"):
            listing = self._list()
        with self._phase(report, "references"):
            references = self._read_references(listing)
        with self._phase(report, "plan"):
            first_seen = self._load_first_seen()
            now_ms = self.state.now_ms()
            observations = _observations(listing, policy, references)
            result = plan(observations, references, first_seen, now_ms, policy)
            self._save_first_seen(result)
        report.counts = result.counts()
        if result.abort_reason:
            raise SweepStopped(Outcome.ABORTED, result.abort_reason)
        return result, first_seen

    def _list(self) -> Listing:
        partitions = {entry.partition for entry in self.config.scope}
        partitions |= {ref.partition for ref in self.config.tag_references}
        return {partition: self.row_store.list_rows(partition) for partition in sorted(partitions)}

    def _read_references(self, listing: Listing) -> References:
        # Admissions first, then manifests: a reference moving admission -> manifest is seen at least
        # once; one moving manifest -> admission is caught by the admission re-read before delete.
        admissions = self.admissions.read()
        manifests = self.manifests.read()
        tags = self.tags.read(listing)
        return References(admissions=admissions, manifests=manifests, tags=tags)

    def _load_first_seen(self) -> dict[RowId, FirstSeen]:
        records: dict[RowId, FirstSeen] = {}
        for entry in self.config.scope:
            for key, seen in self.state.load_first_seen(entry.partition).items():
                records[RowId(entry.partition, key)] = seen
        return records

    def _save_first_seen(self, result: Plan) -> None:
        upserts = self._with_global_indexes(result.first_seen_upserts)
        for partition in {row.partition for row in [*upserts, *result.first_seen_drops]}:
            self.state.save_first_seen(
                partition,
                {row.key: seen for row, seen in upserts.items() if row.partition == partition},
                [row.key for row in result.first_seen_drops if row.partition == partition],
            )

    def _with_global_indexes(self, upserts: Mapping[RowId, FirstSeen]) -> dict[RowId, FirstSeen]:
        """Pin each newly seen row's global index, so a key recreated later is not mistaken for it."""
        pinned: dict[RowId, FirstSeen] = {}
        for batch in _batches(sorted(upserts), self.config.transfer_queue.request_batch):
            found = self.row_store.identities(batch.partition, [row.key for row in batch.rows])
            for row in batch.rows:
                seen = upserts[row]
                now = found.get(row.key)
                if now is not None and now.tags_digest == seen.identity.tags_digest:
                    seen = FirstSeen(seen.at_ms, now)
                pinned[row] = seen
        return pinned

    def _delete(
        self,
        report: SweepReport,
        result: Plan,
        pinned: Mapping[RowId, FirstSeen],
        lease: Lease,
        progress: Progress | None,
    ) -> Lease:
        """Delete in batches. `pinned` holds the identity each row had when first seen unreferenced:
        rows are never deleted on first sight, so every row to delete has such a record."""
        limits = self.config.limits
        total = len(result.to_delete)
        for batch in _batches(result.to_delete, limits.delete_batch):
            started = time.monotonic()
            lease = self._recheck_lease(lease)
            deleted = self._delete_unless_changed(batch, pinned)
            saved = [row for row in batch.rows if row not in deleted]
            report.counts.recheck_saved += len(saved)
            if saved:
                # Each is a race we lost, counted, not an error: the row starts its grace again.
                self.state.save_first_seen(batch.partition, {}, [row.key for row in saved])
            if deleted:
                self._record_deleted(report, result, sorted(deleted), pinned)
            if progress is not None:
                progress(report.counts.deleted + report.counts.recheck_saved, total)
            _throttle(len(batch.rows), limits.max_deletes_per_second, started)
        report.outcome = Outcome.COMPLETED
        return lease

    def _recheck_lease(self, lease: Lease) -> Lease:
        renewed = self.state.renew_lease(lease, self._lease_ttl_ms)
        if renewed is None:
            raise LeaseLost(self.config.namespace)
        return renewed

    def _delete_unless_changed(self, batch: Batch, pinned: Mapping[RowId, FirstSeen]) -> set[RowId]:
        """Re-check, then delete: the rows of the batch deleted. Fences and admissions are read as
        late as we can, then the store matches each row's identity and clears in back-to-back calls
        (TQ has no compare-and-delete)."""
        self._check_fences()
        admitted = self.admissions.reread()
        # Kept: re-referenced since we listed (a writer or a restore admitted it), or never pinned.
        expected = {
            row.key: pinned[row].identity for row in batch.rows if row not in admitted and row in pinned
        }
        if not expected:
            return set()
        # Kept too: recreated under the same key (new global index or tags) or already gone.
        deleted = self.row_store.delete_if_unchanged(batch.partition, expected)
        return {RowId(batch.partition, key) for key in deleted}

    def _record_deleted(
        self, report: SweepReport, result: Plan, rows: Sequence[RowId], pinned: Mapping[RowId, FirstSeen]
    ) -> None:
        deleted = [
            DeletedRow(
                partition=row.partition,
                key=row.key,
                unreferenced_s=result.unreferenced_ms[row] / 1000,
                global_index=pinned[row].identity.global_index,
                tags_digest=pinned[row].identity.tags_digest,
                run_id=report.run_id,
            )
            for row in rows
        ]
        self.state.append_audit(deleted)
        self.state.save_first_seen(rows[0].partition, {}, [row.key for row in rows])
        report.counts.deleted += len(deleted)
        room = DELETED_SAMPLE_SIZE - len(report.deleted_sample)
        report.deleted_sample.extend(deleted[: max(room, 0)])

    def _finish(self, report: SweepReport, lease: Lease | None) -> None:
        try:
            self.state.record_run(report.to_dict())
        except StoreUnavailable as exc:
            log.warning("could not record run %s: %s", report.run_id, exc)
        if lease is not None:
            try:
                self.state.release_lease(lease)
            except StoreUnavailable as exc:
                log.warning("could not release the lease (it expires by itself): %s", exc)

    @contextmanager
    def _phase(self, report: SweepReport, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            report.phases_ms[name] = report.phases_ms.get(name, 0.0) + (time.perf_counter() - started) * 1000


def _observations(listing: Listing, policy: PlanPolicy, references: References) -> Iterator[Observation]:
    for partition, rows in listing.items():
        for key, tags in rows.items():
            row = RowId(partition, key)
            # Digesting tags is the costly part of planning, and only unreferenced in-scope rows need it.
            needs_digest = policy.in_scope(row) and references.source_of(row) is None
            yield Observation(row, tags_digest(tags) if needs_digest else "")


def _batches(rows: Sequence[RowId], size: int) -> Iterator[Batch]:
    for partition, group in groupby(sorted(rows, key=lambda r: r.partition), key=lambda r: r.partition):
        members = list(group)
        for start in range(0, len(members), size):
            yield Batch(partition, tuple(members[start : start + size]))


def _throttle(deleted: int, max_per_second: float, started: float) -> None:
    if max_per_second <= 0:
        return
    wait = deleted / max_per_second - (time.monotonic() - started)
    if wait > 0:
        time.sleep(wait)


def _iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
