"""One sweep: lease -> attach -> references and listing -> plan -> (re-check -> intent -> clear -> confirm)*
-> report.

The imperative shell around plan.py. Each step is a short method; every failure ends the sweep with
nothing more deleted, and the report says how it ended (an unforeseen exception included) and how many
rows it deleted before it stopped.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext

from tq_gc.config import Config
from tq_gc.errors import (
    CheckpointInProgress,
    ConfigError,
    FenceRaised,
    Interrupted,
    LeaseLost,
    ReferenceSourceError,
    StoreUnavailable,
)
from tq_gc.model import (
    Cause,
    FirstSeen,
    ListedKeys,
    Listing,
    Outcome,
    References,
    SweepReport,
    Tags,
    merge_keys,
)
from tq_gc.plan import (
    FirstSeenByPartition,
    Plan,
    PlanPolicy,
    admitted_meanwhile,
    plan,
    stale_partitions,
    unreferenced_rows,
)
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.references.emptied import accepted_sources, collected_yields, guard_emptied_sources
from tq_gc.references.manifests import ManifestsSource
from tq_gc.references.owners import OwnersSource
from tq_gc.references.tags import TagsSource
from tq_gc.sightings import identities_of_keys
from tq_gc.state.base import Recheck, StateStore
from tq_gc.stores.base import RowStore, as_row_store
from tq_gc.sweep import (
    Batch,
    LeaseKeeper,
    Progress,
    Sweep,
    SweepStopped,
    default_holder,
    end_sweep,
    iso_now,
    stop_if_fenced,
    throttle,
    without_cyclic_gc,
)

log = logging.getLogger(__name__)

# The lease is renewed in the background every third of its TTL (sweep.LeaseKeeper): two renewals can fail
# in a row before it lapses, and a long attach or listing (a million rows) never outlasts it.
RENEW_FRACTION = 1 / 3
# Right before a clear, the last renewal must be younger than this fraction of the TTL (monotonic clock):
# a sweeper paused between its re-check and its clear (SIGSTOP, a long GC pause) stops instead.
CLEAR_WITHIN_TTL_FRACTION = 1 / 2


class Collector:
    def __init__(
        self,
        config: Config,
        state: StateStore,
        row_store: RowStore,
        holder: str | None = None,
        *,
        pause_cyclic_gc: bool = False,
    ):
        """`pause_cyclic_gc`: the process is tq-gc's own (the sidecar's actor, the CLI), so a sweep may
        switch the cyclic garbage collector off while it runs (sweep.without_cyclic_gc). Embedded in a
        trainer's process, leave it False: the trainer's own objects are that collector's too."""
        self.config = config
        self.state = state
        self.row_store = as_row_store(row_store)
        self._identity_space: str | None = None  # the row store's at the last sweep that listed it
        self.holder = holder or default_holder()
        self.admissions = AdmissionsSource(state, expect_nonempty=config.admissions.expect_nonempty)
        self.manifests = ManifestsSource(config.manifests)
        self.tags = TagsSource(config.tag_references, row_store)
        self.owners = OwnersSource(config.owner_references, row_store)
        self._lease_ttl_ms = int(config.lease_ttl_seconds * 1000)
        self._stop = threading.Event()
        self._pause_cyclic_gc = pause_cyclic_gc
        self._accept_empty: frozenset[str] = frozenset()

    def sweep(
        self,
        *,
        dry_run: bool = True,
        max_deletes: int | None = None,
        progress: Progress | None = None,
        accept_empty: Collection[str] = (),
    ) -> SweepReport:
        """One sweep. The report says how it ended; it raises only ConfigError (bad config or usage,
        no TransferQueue to attach to), after recording the run, and BaseExceptions (interrupts).

        `accept_empty`: source ids (references/emptied.py) that may read as empty this sweep although
        they named rows at the last one: the operator's word that it is on purpose."""
        if max_deletes is not None and max_deletes < 0:
            raise ValueError(f"max_deletes must be 0 or more, got {max_deletes}")
        self._accept_empty = accepted_sources(self.config, accept_empty)
        report = SweepReport(run_id=uuid.uuid4().hex[:16], namespace=self.config.namespace, dry_run=dry_run)
        sweep = Sweep(report, PlanPolicy.from_config(self.config, max_deletes), progress)
        with without_cyclic_gc() if self._pause_cyclic_gc else nullcontext():
            self._run(sweep, dry_run)
        return report

    def stop(self) -> None:
        """Make a sweep in progress stop before its next request to the row store (a delete call runs
        to its end first), and every later sweep at once."""
        self._stop.set()
        self.row_store.interrupt()

    # -- the sequence -----------------------------------------------------------------------------

    def _run(self, sweep: Sweep, dry_run: bool) -> None:
        report = sweep.report
        report.started_at = iso_now()
        self._take_request_stats()  # requests made before this sweep are not its own
        keeper = LeaseKeeper(lambda: self._renew(sweep), self.config.lease_ttl_seconds * RENEW_FRACTION)
        try:
            self._stop_if_asked()
            with self._phase(report, "lease"):
                self._take_lease(sweep)
            keeper.start()
            with self._phase(report, "attach"):
                self._attach_row_store(sweep)
            self._stop_if_asked()
            self._mark(sweep)
            if dry_run:
                report.outcome = Outcome.DRY_RUN
            else:
                with self._phase(report, "delete"):
                    self._delete(sweep)
                report.outcome = Outcome.COMPLETED
        except SweepStopped as stop:
            end_sweep(report, stop.outcome, stop.cause, stop.reason)
        except Interrupted as exc:
            end_sweep(report, Outcome.ABORTED, Cause.STOPPED, str(exc))
        except LeaseLost as exc:
            end_sweep(report, Outcome.ABORTED, Cause.LEASE_LOST, str(exc))
        except CheckpointInProgress as exc:
            end_sweep(report, Outcome.SKIPPED, Cause.CHECKPOINT_IN_PROGRESS, str(exc))
        except ReferenceSourceError as exc:
            end_sweep(report, Outcome.ABORTED, Cause.SOURCE_FAILED, str(exc))
        except StoreUnavailable as exc:
            end_sweep(report, Outcome.ABORTED, Cause.STORE_FAILED, str(exc))
        except ConfigError as exc:
            end_sweep(report, Outcome.ABORTED, Cause.ERROR, str(exc))
            raise
        except Exception as exc:  # unforeseen: the sweep stops, and says so; it never reads as completed
            log.exception("sweep %s failed", report.run_id)
            end_sweep(report, Outcome.ABORTED, Cause.ERROR, f"{type(exc).__name__}: {exc}")
        except BaseException as exc:
            end_sweep(report, Outcome.ABORTED, Cause.ERROR, f"interrupted ({type(exc).__name__})")
            raise
        finally:
            keeper.stop()
            report.finished_at = iso_now()
            report.record_tq_requests(self._take_request_stats())
            self._finish(sweep)

    def _take_request_stats(self) -> dict[str, list[float]]:
        """The row store's TQ requests since the last call ({operation: [seconds]}); none if it keeps none."""
        return self.row_store.take_request_stats()

    def _take_lease(self, sweep: Sweep) -> None:
        lease = self.state.acquire_lease(self.holder, self._lease_ttl_ms)
        if lease is None:
            holder = self.state.lease_holder()
            who = holder.holder if holder else "another sweeper"
            raise SweepStopped(Outcome.SKIPPED, Cause.LEASE_HELD, f"lease held by {who}")
        sweep.lease, sweep.started_ms = lease, lease.expires_at_ms - self._lease_ttl_ms
        check = self._recheck(sweep)
        stop_if_fenced(check.fences)
        sweep.fence_epoch = check.fence_epoch

    def _attach_row_store(self, sweep: Sweep) -> None:
        """Join the job's TransferQueue now, so that `attach` is timed apart from the listing. Attached
        to another TQ than the last sweep (the job replaced its controller): the first-seen records
        hold the old one's identities, which may name a new row (its global indexes start afresh), so
        they go, and every row's grace starts at its first sighting in the new one."""
        self.row_store.ensure_attached()
        space = self.row_store.identity_space()
        if self._identity_space is not None and space != self._identity_space:
            for entry in self.config.scope:
                self.state.forget_partition(sweep.holds_lease, entry.partition)
        self._identity_space = space

    def _mark(self, sweep: Sweep) -> None:
        report = sweep.report
        listing, references = self._read_references(sweep)
        with self._phase(report, "plan"):
            now_ms = self.state.now_ms()
            sweep.first_seen = self._trusted_first_seen(sweep)
            sweep.plan = plan(listing, references, sweep.first_seen, now_ms, sweep.policy)
            self._save_first_seen(sweep, sweep.plan, listing)
            sweep.plan = self._admitted_meanwhile(sweep, sweep.plan)
        report.counts = sweep.plan.counts()
        if sweep.plan.abort_reason:
            raise SweepStopped(Outcome.ABORTED, Cause.BLAST_RADIUS, sweep.plan.abort_reason)

    def _read_references(self, sweep: Sweep) -> tuple[Listing, References]:
        """The listing, and every reference, read so that no reference that lives through the sweep is
        missed however it moves, for publishers that follow the protocol (move inside an admission,
        `GcClient.holding()`, or inside a checkpoint fence), and once even outside it.

        Inside the protocol: every admission made since the lease was taken is in the write barrier
        (StateStore.admitted_since_lease), which the collector asks after the plan and before every
        delete batch; a fence raised since the lease stops every later delete. A reference that did not
        move while the sweep read is where its source's read found it, so admissions are read first.

        Outside it, one make-before-break move from source X to Y is missed only if every read of Y
        comes before it reaches Y and every read of X after it left X: all reads of Y before all reads
        of X. So for every ordered pair of sources some read of X must precede some read of Y:
        admissions, manifests, tags (the listing), admissions, manifests does that for all six pairs.
        The second admissions read costs nothing unless an admission was made since the first
        (AdmissionsSource.reread). Owner references are read from the listing too, in the tags' slot.
        """
        report = sweep.report
        with self._phase(report, "references"):
            admissions, manifests = self.admissions.read(), self.manifests.read()
        with self._phase(report, "list"):
            listing, existing = self._list()
        with self._phase(report, "references"):
            tags = self.tags.read(listing, existing)
            owners = self.owners.read(listing, existing)
            admissions = merge_keys(admissions, self.admissions.reread())
            manifests = merge_keys(manifests, self.manifests.read())
        yields = collected_yields(self.manifests.yields(), self.tags.counts, self.owners.counts)
        guard_emptied_sources(self.state, sweep.holds_lease, self.config, self._accept_empty, yields)
        return listing, References(admissions=admissions, manifests=manifests, tags=tags, owners=owners)

    def _list(self) -> tuple[Listing, set[str]]:
        """Every scope, tag and owner partition's rows, and the partitions the store has (a tag or owner
        partition it lacks fails its source; an in-scope one is simply empty).

        A reference source's partition is listed with its rows' tags, so that a reference moving
        between two of its rows is seen; a partition that is only swept, by its keys alone (a row that
        listing misses is not deleted, and its identity is read when it is first seen)."""
        existing = set(self.row_store.partitions())
        referring = set(self.tags.partitions) | set(self.owners.partitions)
        partitions = {entry.partition for entry in self.config.scope} | referring
        listing: dict[str, Mapping[str, Tags]] = {}
        for partition in sorted(partitions):
            if partition in referring:
                listing[partition] = self.row_store.list_rows(partition)
            else:
                listing[partition] = ListedKeys(self.row_store.list_keys(partition))
        return listing, existing

    def _trusted_first_seen(self, sweep: Sweep) -> FirstSeenByPartition:
        """Load the records of each scope partition, after forgetting those not to be trusted. The gap
        in sweeping runs from the last sweep's observation to this sweep's start (its lease): the
        seconds a sweep spends joining Ray and listing are sweeping, not a pause."""
        scope = [entry.partition for entry in self.config.scope]
        stale = stale_partitions(self.state.observed(), scope, sweep.started_ms, sweep.policy.grace_ms)
        for partition in sorted(stale):
            self.state.forget_partition(sweep.holds_lease, partition)
        return {
            partition: {} if partition in stale else self.state.load_first_seen(partition)
            for partition in scope
        }

    def _save_first_seen(self, sweep: Sweep, result: Plan, listing: Listing) -> None:
        """Record new first sightings, drop records of rows referenced again or gone, and mark every
        scope partition observed now. Each write checks our lease (LeaseLost if it was taken)."""
        for entry in self.config.scope:
            partition = entry.partition
            upserts = result.first_seen_upserts.get(partition, {})
            pinned = self._pinned(partition, upserts, listing.get(partition, {}))
            drops = result.first_seen_drops.get(partition, ())
            self.state.save_first_seen(sweep.holds_lease, partition, pinned, drops, result.now_ms)

    def _admitted_meanwhile(self, sweep: Sweep, result: Plan) -> Plan:
        """The plan without the rows admitted since the sweep took its lease (the write barrier), their
        records (just saved) dropped again. Asked after the save: a row whose reference moved by the
        protocol at any time up to the save was admitted on the way, so no record claims it unreferenced
        while it was referenced, and its grace starts only once it really is unreferenced."""
        admitted: dict[str, set[str]] = {}
        for partition, unreferenced in sorted(unreferenced_rows(result).items()):
            hits = self.state.admitted_since_lease(sweep.holds_lease, partition, unreferenced)
            if hits:
                admitted[partition] = hits
        for partition, keys in sorted(admitted.items()):
            self.state.save_first_seen(sweep.holds_lease, partition, {}, keys, result.now_ms)
        return admitted_meanwhile(result, admitted)

    def _pinned(
        self, partition: str, upserts: Mapping[str, FirstSeen], listed: Mapping[str, Tags]
    ) -> dict[str, FirstSeen]:
        """Each newly seen row's record with its identity as the store has it now (global index and
        tags digest), so that a key recreated later is not mistaken for it; only if it is still the row
        the listing saw (the same tags, or the same global index for a partition listed by its keys).
        A row that cannot be pinned (gone since the listing) is not recorded: a record without its
        global index would match a row written later under the same key with the same tags, which would
        then be deleted on its first sighting. It is seen afresh by the next sweep."""
        indexes = listed.indexes if isinstance(listed, ListedKeys) else None
        pinned: dict[str, FirstSeen] = {}
        keys = sorted(upserts)
        size = self.config.transfer_queue.request_batch
        for start in range(0, len(keys), size):
            found = self.row_store.identities(partition, keys[start : start + size])
            for key, identity in found.items():
                record = upserts[key]
                if indexes is None:
                    same_row = identity.tags_digest == record.identity.tags_digest
                else:
                    same_row = identity.global_index == indexes[key]
                if same_row:
                    pinned[key] = FirstSeen(record.at_ms, identity)
        return pinned

    # -- deleting ---------------------------------------------------------------------------------

    def _delete(self, sweep: Sweep) -> None:
        assert sweep.plan is not None, "the sweep planned first"
        limits = self.config.limits
        total = sum(len(keys) for keys in sweep.plan.to_delete.values())
        counts = sweep.report.counts
        started = time.monotonic()
        for batch in self._delete_batches(sweep.plan.to_delete):
            self._stop_if_asked()
            check = self._recheck(sweep)
            stop_if_fenced(check.fences)
            if check.fence_epoch != sweep.fence_epoch:
                raise SweepStopped(
                    Outcome.SKIPPED,
                    Cause.FENCE_RAISED,
                    "a checkpoint fence was raised since this sweep read its references (it may have "
                    "written a manifest this sweep did not read); the next sweep starts afresh",
                )
            self._delete_batch(sweep, batch, check)
            if sweep.progress is not None:
                sweep.progress(counts.deleted + counts.recheck_saved, total)
            throttle(len(batch.keys), limits.max_deletes_per_second, started)
            started = time.monotonic()  # the store's wait for the next batch counts toward its throttle

    def _delete_batches(self, to_delete: Mapping[str, Sequence[str]]) -> Iterator[Batch]:
        """The plan's deletes in the row store's batches: it sizes each, and waits for its quiet moment
        before it yields one, so before the batch's re-check, never between the re-check and the clear."""
        most_rows = self.config.limits.delete_batch
        for partition, keys in to_delete.items():
            for keys_batch in self.row_store.delete_batches(partition, keys, most_rows):
                yield Batch(partition, tuple(keys_batch))

    def _delete_batch(self, sweep: Sweep, batch: Batch, check: Recheck) -> None:
        """Re-check, write the intent, clear, confirm. Fences and admissions were read as late as we can
        (with the lease renewal); the store then matches each row's identity and clears in back-to-back
        calls (TQ has no compare-and-delete)."""
        counts = sweep.report.counts
        records = sweep.first_seen.get(batch.partition, {})
        # Every planned row has a record: rows are never deleted on first sight.
        recorded = records.keys()  # a Sightings' is its dict's view: membership at C speed
        keys = [key for key in batch.keys if key in recorded]
        # Kept: admitted since this sweep took its lease (the write barrier). That covers every admission
        # live now that the reads before the plan did not see, and every reference that moved by the
        # protocol since the sweep began, wherever it went and however often.
        admitted = self.state.admitted_since_lease(sweep.holds_lease, batch.partition, keys)
        keys = [key for key in keys if key not in admitted]
        counts.recheck_saved += len(batch.keys) - len(keys)
        if not keys:
            self._forget_saved(sweep, batch)
            return
        identities = identities_of_keys(records, keys)
        intent = sweep.intent(batch.partition, identities, records)
        try:
            intent_id = self.state.record_intent(
                sweep.holds_lease, intent, sweep.fence_epoch, self._lease_ttl_ms
            )
        except FenceRaised as exc:  # raised since the re-check: the intent was refused, nothing written
            raise SweepStopped(Outcome.SKIPPED, Cause.FENCE_RAISED, str(exc)) from exc
        self._check_lease_fresh(sweep)
        try:
            cleared = self.row_store.delete_if_unchanged(batch.partition, identities)
        except BaseException:
            counts.failed += len(keys)  # deleted or not, nobody knows: the intent stays unconfirmed
            raise
        # Kept too: recreated under the same key (new global index or tags) or already gone. Each is a
        # race we lost, counted, not an error; its record is dropped, so its grace starts again.
        counts.deleted += len(cleared)
        counts.recheck_saved += len(keys) - len(cleared)
        self.state.confirm_deletes(sweep.holds_lease, intent_id, intent, cleared, forget=batch.keys)
        sweep.sample(intent, cleared)

    def _forget_saved(self, sweep: Sweep, batch: Batch) -> None:
        """A batch the re-check saved whole: its rows were referenced during the sweep, so their records
        go and their grace starts again at their next sighting (a partly saved batch's records go with
        its confirmation)."""
        assert sweep.plan is not None, "the sweep planned first"
        self.state.save_first_seen(sweep.holds_lease, batch.partition, {}, batch.keys, sweep.plan.now_ms)

    # -- the lease --------------------------------------------------------------------------------

    def _recheck(self, sweep: Sweep) -> Recheck:
        """Renew the lease (LeaseLost if it is gone) and read fences and the admissions version, on the
        sweeping thread: what it reads here vouches for its next clear (_check_lease_fresh)."""
        started = time.monotonic()
        check = self._renew(sweep)
        sweep.renewed_at = started
        return check

    def _renew(self, sweep: Sweep) -> Recheck:
        """Renew the lease, and with it a delete batch's in-flight mark (LeaseLost if it is gone). The
        background keeper's renewals come here only: they vouch for nothing the sweeping thread read."""
        check = self.state.recheck(sweep.holds_lease, self._lease_ttl_ms)
        if check.lease is None:
            raise LeaseLost(self.config.namespace)
        sweep.lease = check.lease
        return check

    def _check_lease_fresh(self, sweep: Sweep) -> None:
        """Right before a clear: were we paused since the renewal? The store would not tell us in time."""
        elapsed = time.monotonic() - sweep.renewed_at
        if elapsed > self.config.lease_ttl_seconds * CLEAR_WITHIN_TTL_FRACTION:
            raise SweepStopped(
                Outcome.ABORTED,
                Cause.LEASE_LOST,
                f"{elapsed:.1f} s passed between the lease renewal and the clear (the sweeper was paused?); "
                "stopped before clearing, the lease may already be someone else's",
            )

    def _stop_if_asked(self) -> None:
        if self._stop.is_set():
            raise SweepStopped(Outcome.ABORTED, Cause.STOPPED, "asked to stop (the sidecar shutting down?)")

    def _finish(self, sweep: Sweep) -> None:
        report = sweep.report
        try:
            if not self.state.record_run(report.to_dict(), sweep.lease):
                log.warning("run %s not recorded: its lease was lost (%s)", report.run_id, report.outcome)
        except Exception as exc:  # the outcome is decided; a summary we cannot write is only logged
            log.warning("could not record run %s: %s", report.run_id, exc)
        if sweep.lease is not None:
            try:
                self.state.release_lease(sweep.lease)
            except Exception as exc:
                log.warning("could not release the lease (it expires by itself): %s", exc)

    @contextmanager
    def _phase(self, report: SweepReport, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            report.phases_ms[name] = report.phases_ms.get(name, 0.0) + (time.perf_counter() - started) * 1000
