"""One sweep: lease -> attach -> references and listing -> plan -> (re-check -> intent -> clear -> confirm)*
-> report.

The imperative shell around plan.py, as a sequence of named steps, each done by one part of the sweep
(observe.py, record.py, delete.py, lease.py). Every failure ends the sweep with nothing more
deleted, and the report says how it ended (an unforeseen exception included) and how many rows it
deleted before it stopped.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Collection
from contextlib import nullcontext

from tq_gc.config import Config, max_deletes_clamped, plan_policy
from tq_gc.decisions import Decision
from tq_gc.errors import BlastRadiusExceeded, Interrupted, TqClaimed, TqGcError
from tq_gc.footprint import bytes_of
from tq_gc.plan import plan
from tq_gc.referenced import References
from tq_gc.references.emptied import accepted_sources
from tq_gc.report import Cause, Outcome, SweepReport, WarningKind, warn
from tq_gc.rows import Listing
from tq_gc.state.base import StateStore
from tq_gc.state.keys import RUNS_KEPT
from tq_gc.stores.base import RowStore, as_row_store
from tq_gc.stores.claims import StoreClaim, state_address
from tq_gc.sweep.clocks import utc_now_iso
from tq_gc.sweep.cyclic_gc import paused_cyclic_gc
from tq_gc.sweep.delete import Deleter
from tq_gc.sweep.fill import read_storage_fill
from tq_gc.sweep.lease import LEASE_TTL_SECONDS, SweepLease, default_holder
from tq_gc.sweep.observe import Observer
from tq_gc.sweep.record import Recorder
from tq_gc.sweep.run import PhaseListener, Progress, SweepRun

log = logging.getLogger(__name__)


class Collector:
    def __init__(
        self,
        config: Config,
        state: StateStore,
        row_store: RowStore,
        holder: str | None = None,
        *,
        pause_cyclic_gc: bool = False,
        lease_ttl_seconds: float = LEASE_TTL_SECONDS,
    ):
        """`pause_cyclic_gc`: the process is tq-gc's own (the sidecar's actor, the CLI), so a sweep may
        switch the cyclic garbage collector off while it runs (cyclic_gc.paused_cyclic_gc). Embedded in a
        trainer's process, leave it False: the trainer's own objects are that collector's too.
        `lease_ttl_seconds`: the fixed 60 s, unless a test wants a lease that lapses sooner.

        Each sweep holds the row store's claim for this collector's state (stores/claims.py) once
        attached: a TQ claimed for another state store skips the sweep. The claim lasts until close(),
        or until the row store closes, or this process ends."""
        self.claim: StoreClaim | None = None  # asked of the row store at the first attach
        self._claim_space: str | None = None  # the row store instance the claim was asked of
        self.config = config
        self.state = state
        self.row_store = row_store = as_row_store(row_store)
        row_store.size_partitions({entry.partition for entry in config.scope})
        self._row_store_identity: str | None = None  # the instance this collector last attached to
        self.holder = holder or default_holder()
        self._stop = threading.Event()
        self._pause_cyclic_gc = pause_cyclic_gc
        self.lease = SweepLease(config, state, self.holder, lease_ttl_seconds)
        self.observer = Observer(config, state, row_store)
        self.recorder = Recorder(config, state, row_store)
        self.deleter = Deleter(state, row_store, self.lease, self._stop_if_asked)

    def sweep(
        self,
        *,
        dry_run: bool = True,
        max_deletes: int | None = None,
        progress: Progress | None = None,
        accept_empty: Collection[str] = (),
        sample_all: bool = False,
        phases: PhaseListener | None = None,
    ) -> SweepReport:
        """One sweep. The report says how it ended; it raises only ConfigError (bad config or usage,
        no TransferQueue to attach to), after recording the run, and BaseExceptions (interrupts).

        `accept_empty`: source ids (references/emptied.py) that may read as empty this sweep although
        they named rows at the last one: the operator's word that it is on purpose. `sample_all`: the
        report's deleted_sample holds every row deleted (a dry run: it would delete), not the first 20.
        `phases`: told as each phase starts and ends, with its rows (the CLI's progress)."""
        if max_deletes is not None and max_deletes < 0:
            raise ValueError(f"max_deletes must be 0 or more, got {max_deletes}")
        accepted = accepted_sources(self.config, accept_empty)
        report = SweepReport(run_id=uuid.uuid4().hex[:16], namespace=self.config.namespace, dry_run=dry_run)
        run = SweepRun(report, plan_policy(self.config, max_deletes), progress, accepted)
        run.sample_size = None if sample_all else run.sample_size
        run.phase_listener = phases
        clamped = max_deletes_clamped(self.config, max_deletes)
        if clamped is not None:
            warn(report, WarningKind.MAX_DELETES_CLAMPED, clamped)
        with paused_cyclic_gc() if self._pause_cyclic_gc else nullcontext():
            self._run(run, dry_run)
        return report

    def stop(self) -> None:
        """Make a sweep in progress stop before its next request to the row store (a delete call runs
        to its end first), and every later sweep at once."""
        self._stop.set()
        self.row_store.interrupt()

    # -- the sequence -----------------------------------------------------------------------------

    def _run(self, run: SweepRun, dry_run: bool) -> None:
        report = run.report
        report.started_at = utc_now_iso()
        self._take_request_stats()  # requests made before this sweep are not its own, nor waits
        self.row_store.take_pacing_stats()
        self.row_store.take_listings()
        renewal = self.lease.renewed_in_background(run)
        try:
            self._stop_if_asked()
            with run.phase("lease"):
                self.lease.take(run)
            renewal.start()
            with run.phase("attach"):
                self._attach_row_store(run)
                self._hold_claim(run, dry_run)
            self._stop_if_asked()
            listing, references = self.observer.read(run)
            self._plan_and_record(run, listing, references)
            if dry_run:
                run.sample_planned()
                report.outcome = Outcome.DRY_RUN
            else:
                with run.phase("delete", lambda: report.counts.deleted):
                    self.deleter.delete(run)
                report.outcome = Outcome.COMPLETED
            read_storage_fill(self.row_store, self.config, report)
        except TqGcError as exc:  # foreseen: the error says how the sweep ends (errors.py)
            run.end(exc.outcome, exc.cause, str(exc))
            if exc.reaches_caller:
                raise
        except Exception as exc:  # unforeseen: the sweep stops, and says so; it never reads as completed
            log.exception("sweep %s failed", report.run_id)
            run.end(Outcome.ABORTED, Cause.ERROR, f"{type(exc).__name__}: {exc}")
        except BaseException as exc:
            run.end(Outcome.ABORTED, Cause.ERROR, f"interrupted ({type(exc).__name__})")
            raise
        finally:
            renewal.stop()
            report.finished_at = utc_now_iso()
            report.record_tq_requests(self._take_request_stats())
            report.record_pacing(self.row_store.take_pacing_stats())
            report.record_listings(self.row_store.take_listings())
            self._finish(run)

    def _take_request_stats(self) -> dict[str, list[float]]:
        """The row store's TQ requests since the last call ({operation: [seconds]}); none if it keeps none."""
        return self.row_store.take_request_stats()

    def _attach_row_store(self, run: SweepRun) -> None:
        """Join the job's TransferQueue now, so that `attach` is timed apart from the listing. Attached
        to another TQ than the last recorded sweep, of any process (the job replaced its controller):
        the first-seen records hold the old one's identities, which may name a new row (its global
        indexes start afresh), so they go, and every row's grace starts at its first sighting in the
        new one."""
        self.row_store.ensure_attached()
        space = self.row_store.identity_space()
        run.report.row_store_identity = space
        last = self._row_store_identity or self._last_recorded_row_store_identity()
        if space is not None and last is not None and space != last:
            log.warning("the row store was replaced since the last sweep (%s, was %s)", space, last)
            for entry in self.config.scope:
                self.state.forget_partition(run.held_lease, entry.partition)
        self._row_store_identity = space or last

    def _last_recorded_row_store_identity(self) -> str | None:
        """The row store instance the newest recorded sweep that knew one attached to: read once a
        process (its first sweep), then this collector's own last attach stands for it. A sweeper of
        another process that attached since to a new instance only makes this one forget again."""
        runs = self.state.recent_runs(RUNS_KEPT)
        return next((r["row_store_identity"] for r in runs if r.get("row_store_identity")), None)

    def _hold_claim(self, run: SweepRun, dry_run: bool) -> None:
        """Hold the row store's claim for our state store (a dry run only looks), or stop with nothing
        deleted. A row store replaced since (a new TQ) is asked for a claim of its own."""
        space = run.report.row_store_identity
        if self.claim is None or space != self._claim_space:
            self.release_claim()
            self.claim = self.row_store.claim(self.holder, state_address(self.config.state_url, self.holder))
            self._claim_space = space
        refused = None if self.claim is None else self.claim.hold(take=not dry_run, state=self.state)
        if refused is not None:
            raise TqClaimed(refused)

    def release_claim(self) -> None:
        """End the claim this collector's sweeps took, if any (idempotent); the next sweep takes it again."""
        claim, self.claim = self.claim, None
        if claim is not None:
            claim.release()

    def close(self) -> None:
        """End what this collector holds beyond a sweep: the row store's claim. Not the stores, which
        are the caller's."""
        self.release_claim()

    def _plan_and_record(self, run: SweepRun, listing: Listing, references: References) -> None:
        """Plan from what the sweep saw and the records it trusts, record its new sightings, and take
        back the rows admitted meanwhile (the write barrier). BlastRadiusExceeded if the plan aborts."""
        with run.phase("plan", lambda: None if run.plan is None else run.plan.count(Decision.DELETE)):
            now_ms = self.state.now_ms()
            run.first_seen = self.recorder.trusted(run)
            run.plan = plan(listing, references, run.first_seen, now_ms, run.policy)
            self.recorder.save(run, run.plan, listing)
            run.plan = self.recorder.without_admitted_meanwhile(run, run.plan)
        run.report.counts = run.plan.counts()
        run.sizes = {
            entry.partition: self.row_store.row_sizes(entry.partition) for entry in self.config.scope
        }
        run.listing = listing
        run.report.bytes = bytes_of(run.plan.buckets, run.sizes, listing)
        if run.plan.abort_reason:
            raise BlastRadiusExceeded(run.plan.abort_reason)

    def _stop_if_asked(self) -> None:
        if self._stop.is_set():
            raise Interrupted("asked to stop (the sidecar shutting down?)")

    def _finish(self, run: SweepRun) -> None:
        report = run.report
        try:
            if not self.state.record_run(report.to_dict(), run.lease):
                log.warning("run %s not recorded: its lease was lost (%s)", report.run_id, report.outcome)
        except Exception as exc:  # the outcome is decided; a summary we cannot write is only logged
            log.warning("could not record run %s: %s", report.run_id, exc)
        self.lease.release(run)
