"""One sweep: lease -> fence -> list -> references -> plan -> (re-check -> delete)* -> report.

The imperative shell around plan.py. Each step is a short method; every I/O failure ends the sweep
with nothing more deleted, and the run is recorded whatever its outcome.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from tq_gc.config import Config
from tq_gc.errors import LeaseLost, ReferenceSourceError, StoreUnavailable
from tq_gc.model import DELETED_SAMPLE_SIZE, AuditBatch, FirstSeen, Outcome, References, SweepReport
from tq_gc.plan import FirstSeenByPartition, Listing, Plan, PlanPolicy, plan
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.references.manifests import ManifestsSource
from tq_gc.references.tags import TagsSource
from tq_gc.state.base import Lease, Recheck, StateStore
from tq_gc.stores.base import RowStore

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
# How a report says the lease was held elsewhere; metrics count lease contention by it.
LEASE_HELD_REASON = "lease held by"


class SweepStopped(Exception):
    """Ends a sweep early with an outcome: skipped (lease held, fence up) or aborted (fail closed)."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Batch:
    partition: str
    keys: tuple[str, ...]


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
        """One sweep, whatever happens: the report says how it ended; it never raises for an outcome."""
        with _without_cyclic_gc():
            return self._sweep(dry_run, max_deletes, progress)

    def _sweep(self, dry_run: bool, max_deletes: int | None, progress: Progress | None) -> SweepReport:
        report = SweepReport(run_id=uuid.uuid4().hex[:16], namespace=self.config.namespace, dry_run=dry_run)
        report.started_at = _iso_now()
        lease: Lease | None = None
        try:
            with self._phase(report, "lease"):
                lease = self._take_lease()
                _stop_if_fenced(self.state.live_fences())
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
            raise SweepStopped(Outcome.SKIPPED, f"{LEASE_HELD_REASON} {who}")
        return lease

    def _mark(self, report: SweepReport, policy: PlanPolicy) -> tuple[Plan, FirstSeenByPartition]:
        with self._phase(report, "list"):
            listing = self._list()
        with self._phase(report, "references"):
            references = self._read_references(listing)
        with self._phase(report, "plan"):
            first_seen = {
                entry.partition: self.state.load_first_seen(entry.partition) for entry in self.config.scope
            }
            result = plan(listing, references, first_seen, self.state.now_ms(), policy)
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

    def _save_first_seen(self, result: Plan) -> None:
        # Only the lease holder writes first-seen records: we hold it here.
        for partition in result.first_seen_upserts.keys() | result.first_seen_drops.keys():
            upserts = self._with_global_indexes(partition, result.first_seen_upserts.get(partition, {}))
            self.state.save_first_seen(partition, upserts, result.first_seen_drops.get(partition, ()))

    def _with_global_indexes(self, partition: str, upserts: Mapping[str, FirstSeen]) -> dict[str, FirstSeen]:
        """Pin each newly seen row's global index, so a key recreated later is not mistaken for it."""
        pinned = dict(upserts)
        keys = sorted(upserts)
        size = self.config.transfer_queue.request_batch
        for start in range(0, len(keys), size):
            found = self.row_store.identities(partition, keys[start : start + size])
            for key, identity in found.items():
                if identity.tags_digest == upserts[key].identity.tags_digest:
                    pinned[key] = FirstSeen(upserts[key].at_ms, identity)
        return pinned

    def _delete(
        self,
        report: SweepReport,
        result: Plan,
        pinned: FirstSeenByPartition,
        lease: Lease,
        progress: Progress | None,
    ) -> Lease:
        """Delete in batches. `pinned` holds the identity each row had when first seen unreferenced:
        rows are never deleted on first sight, so every row to delete has such a record."""
        limits = self.config.limits
        total = sum(len(keys) for keys in result.to_delete.values())
        for batch in _batches(result.to_delete, limits.delete_batch):
            started = time.monotonic()
            recheck = self.state.recheck(lease, self._lease_ttl_ms)
            lease = self._renewed(recheck)
            records = pinned.get(batch.partition, {})
            cleared = self._delete_unless_changed(batch, records, recheck)
            deleted = self._count_saved(report, batch, cleared)
            if deleted:
                self._record_deleted(report, result.now_ms, batch.partition, deleted, records)
            if progress is not None:
                progress(report.counts.deleted + report.counts.recheck_saved, total)
            _throttle(len(batch.keys), limits.max_deletes_per_second, started)
        report.outcome = Outcome.COMPLETED
        return lease

    def _renewed(self, recheck: Recheck) -> Lease:
        if recheck.lease is None:
            raise LeaseLost(self.config.namespace)
        return recheck.lease

    def _delete_unless_changed(
        self, batch: Batch, records: Mapping[str, FirstSeen], recheck: Recheck
    ) -> set[str]:
        """Re-check, then delete: the keys of the batch deleted. Fences and admissions are read as
        late as we can (with the lease renewal), then the store matches each row's identity and
        clears in back-to-back calls (TQ has no compare-and-delete)."""
        _stop_if_fenced(recheck.fences)
        admitted = self.admissions.reread_keys(batch.partition, recheck.admissions_version)
        # Kept: re-referenced since we listed (a writer or a restore admitted it), or never pinned.
        keys = batch.keys if admitted.isdisjoint(batch.keys) else [k for k in batch.keys if k not in admitted]
        expected = {key: records[key].identity for key in keys if key in records}
        if not expected:
            return set()
        # Kept too: recreated under the same key (new global index or tags) or already gone.
        return self.row_store.delete_if_unchanged(batch.partition, expected)

    def _count_saved(self, report: SweepReport, batch: Batch, cleared: set[str]) -> Sequence[str]:
        """The batch's deleted keys, in batch order. The others a re-check saved: each is a race we
        lost, counted, not an error, and the row starts its grace again."""
        if len(cleared) == len(batch.keys):  # the usual case
            return batch.keys
        saved = [key for key in batch.keys if key not in cleared]
        report.counts.recheck_saved += len(saved)
        self.state.save_first_seen(batch.partition, {}, saved)
        return [key for key in batch.keys if key in cleared]

    def _record_deleted(
        self,
        report: SweepReport,
        now_ms: int,
        partition: str,
        keys: Sequence[str],
        records: Mapping[str, FirstSeen],
    ) -> None:
        """Audit the deleted rows and drop their first-seen records (one state call per batch)."""
        seen = [records[key] for key in keys]
        batch = AuditBatch(
            run_id=report.run_id,
            partition=partition,
            keys=tuple(keys),
            unreferenced_ms=tuple(now_ms - record.at_ms for record in seen),
            global_indexes=tuple(record.identity.global_index for record in seen),
            tags_digests=tuple(record.identity.tags_digest for record in seen),
        )
        self.state.record_deletes(batch)
        report.counts.deleted += len(batch)
        room = DELETED_SAMPLE_SIZE - len(report.deleted_sample)
        if room > 0:
            report.deleted_sample.extend(batch.rows()[:room])

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


def _batches(to_delete: Mapping[str, Sequence[str]], size: int) -> Iterator[Batch]:
    """Batches of one partition each, keeping the plan's order within a partition."""
    for partition, keys in to_delete.items():
        for start in range(0, len(keys), size):
            yield Batch(partition, tuple(keys[start : start + size]))


def _stop_if_fenced(fences: Mapping[str, int]) -> None:
    if fences:
        raise SweepStopped(Outcome.SKIPPED, f"checkpoint fence up: {', '.join(sorted(fences))}")


def _throttle(deleted: int, max_per_second: float, started: float) -> None:
    if max_per_second <= 0:
        return
    wait = deleted / max_per_second - (time.monotonic() - started)
    if wait > 0:
        time.sleep(wait)


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """A sweep allocates millions of small objects and makes no reference cycles: the cyclic GC
    only rescans the listing again and again (measured: it doubles the plan's time at 100k rows)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
