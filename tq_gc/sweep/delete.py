"""Deleting what the plan chose, batch by batch: re-check, write the intent, clear, confirm. Every
failure stops the deletes with nothing more cleared; a row that changed under us is kept and counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tq_gc.errors import FenceEpochMoved
from tq_gc.first_seen import audit_intent, first_seen_identities
from tq_gc.footprint import bytes_of_keys
from tq_gc.state.base import Recheck, StateStore
from tq_gc.stores.base import RowStore
from tq_gc.sweep.lease import SweepLease, stop_if_fenced
from tq_gc.sweep.run import SweepRun


@dataclass(frozen=True, slots=True)
class Batch:
    partition: str
    keys: tuple[str, ...]


def store_batches(row_store: RowStore, to_delete: Mapping[str, Sequence[str]]) -> Iterator[Batch]:
    """The plan's deletes in the row store's batches, one partition each, in the plan's order: the store
    sizes and paces them, and waits (its throttle, its quiet moment) before it yields one, so before the
    batch's re-check, never between the re-check and the clear."""
    for partition, keys in to_delete.items():
        for keys_batch in row_store.delete_batches(partition, keys):
            yield Batch(partition, tuple(keys_batch))


class Deleter:
    """Deletes a sweep's plan. `stop_if_asked` raises Interrupted once the sweeper is asked to stop."""

    def __init__(
        self,
        state: StateStore,
        row_store: RowStore,
        lease: SweepLease,
        stop_if_asked: Callable[[], None],
    ) -> None:
        self.state = state
        self.row_store = row_store
        self.lease = lease
        self._stop_if_asked = stop_if_asked

    def delete(self, run: SweepRun) -> None:
        to_delete = run.planned.to_delete
        total = sum(len(keys) for keys in to_delete.values())
        counts = run.report.counts
        for batch in store_batches(self.row_store, to_delete):
            self._stop_if_asked()
            check = self.lease.recheck(run)
            stop_if_fenced(check.fences)
            if check.fence_epoch != run.fence_epoch:
                raise FenceEpochMoved()
            self._delete_batch(run, batch, check)
            if run.progress is not None:
                run.progress(counts.deleted + counts.recheck_saved, total)

    def _delete_batch(self, run: SweepRun, batch: Batch, check: Recheck) -> None:
        """Re-check, write the intent, clear, confirm. Fences and admissions were read as late as we can
        (with the lease renewal); the store then matches each row's identity and clears in back-to-back
        calls (TQ has no compare-and-delete)."""
        counts = run.report.counts
        records = run.first_seen.get(batch.partition, {})
        # Every planned row has a record: rows are never deleted on first sight.
        recorded = records.keys()  # a FirstSeenRecords' is its dict's view: membership at C speed
        keys = [key for key in batch.keys if key in recorded]
        # Kept: admitted since this sweep took its lease (the write barrier). That covers every admission
        # live now that the reads before the plan did not see, and every reference that moved by the
        # protocol since the sweep began, wherever it went and however often.
        admitted = self.state.admitted_since_lease(run.held_lease, batch.partition, keys)
        keys = [key for key in keys if key not in admitted]
        counts.recheck_saved += len(batch.keys) - len(keys)
        if not keys:
            self._forget_saved(run, batch)
            return
        identities = first_seen_identities(records, keys)
        intent = audit_intent(run.report.run_id, batch.partition, records, keys, run.planned.now_ms)
        # FenceRaised if a fence came since the re-check: the intent was refused, nothing written.
        intent_id = self.state.record_intent(run.held_lease, intent, run.fence_epoch, self.lease.ttl_ms)
        self.lease.check_fresh(run)
        try:
            cleared = self.row_store.delete_if_unchanged(batch.partition, identities)
        except BaseException:
            counts.failed += len(keys)  # deleted or not, nobody knows: the intent stays unconfirmed
            raise
        # Kept too: recreated under the same key (new global index or tags) or already gone. Each is a
        # race we lost, counted, not an error; its record is dropped, so its grace starts again.
        counts.deleted += len(cleared)
        sizes, listed = run.sizes.get(batch.partition, {}), run.listing.get(batch.partition)
        run.report.bytes.reclaimed += bytes_of_keys(sizes, cleared, listed)  # cleared: planned, so listed
        counts.recheck_saved += len(keys) - len(cleared)
        self.state.confirm_deletes(run.held_lease, intent_id, intent, cleared, forget=batch.keys)
        run.sample(intent, cleared)

    def _forget_saved(self, run: SweepRun, batch: Batch) -> None:
        """A batch the re-check saved whole: its rows were referenced during the sweep, so their records
        go and their grace starts again at their next sighting (a partly saved batch's records go with
        its confirmation)."""
        self.state.save_first_seen(run.held_lease, batch.partition, {}, batch.keys, run.planned.now_ms)
