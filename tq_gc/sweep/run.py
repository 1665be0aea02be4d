"""One sweep's state, from the lease to the report: what the sweep's parts (observe, first_seen,
delete, lease) read and write as the sweep goes."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tq_gc.audit import AuditBatch, DeletedRow
from tq_gc.footprint import SizesByPartition
from tq_gc.plan import FirstSeenByPartition, Plan, PlanPolicy
from tq_gc.report import DELETED_SAMPLE_SIZE, Cause, Outcome, SweepReport
from tq_gc.rows import Listing
from tq_gc.state.base import Lease
from tq_gc.sweep.clocks import timed_phase

Progress = Callable[[int, int], None]
# A phase of the sweep (report.PHASES) started (rows and seconds None) or ended: the rows it counted, if it
# counts any, and the seconds it took. A phase may run in several stretches (references).
PhaseListener = Callable[[str, int | None, float | None], None]


@dataclass
class SweepRun:
    """One sweep's state, from the lease to the report."""

    report: SweepReport
    policy: PlanPolicy
    progress: Progress | None
    # Source ids (references/emptied.py) that may read as empty this sweep: the operator's word.
    accept_empty: frozenset[str] = frozenset()
    lease: Lease | None = None
    renewed_at: float = 0.0  # time.monotonic() when the lease was last renewed on the sweeping thread
    fence_epoch: int = 0  # the store's fence epoch before any reference was read
    started_ms: int = 0  # the store's clock when the lease was taken: sweeping resumed then
    server_run: str = ""  # the state store's server process when the lease was taken (Recheck.server_run)
    # Why this sweep may delete nothing more although its lease lives: the state store was away (a renewal
    # failed) or restarted mid-sweep, so admissions made meanwhile may be in no write barrier.
    interrupted: str | None = None
    plan: Plan | None = None
    # Each planned row's first-seen record: its identity then, and since when it is unreferenced.
    first_seen: FirstSeenByPartition = field(default_factory=dict)
    # {partition: {key: bytes}} of the in-scope rows whose size the listing read.
    sizes: SizesByPartition = field(default_factory=dict)
    # What the plan was made from: the rows the sizes are looked up among (footprint.bytes_of_keys).
    listing: Listing = field(default_factory=dict)
    # How many rows the report's deleted_sample holds: None for all.
    sample_size: int | None = DELETED_SAMPLE_SIZE
    phase_listener: PhaseListener | None = None

    @contextmanager
    def phase(self, name: str, rows: Callable[[], int | None] = lambda: None) -> Iterator[None]:
        """Time the block as the report's phase `name`, and tell the listener when it starts and ends
        (with `rows()`, read once it ended)."""
        listener = self.phase_listener
        if listener is not None:
            listener(name, None, None)
        started = time.perf_counter()
        with timed_phase(self.report, name):
            yield
        if listener is not None:
            listener(name, rows(), time.perf_counter() - started)

    @property
    def held_lease(self) -> Lease:
        """The lease this sweep holds, which every write of its names."""
        assert self.lease is not None, "the sweep took its lease first"
        return self.lease

    @property
    def planned(self) -> Plan:
        assert self.plan is not None, "the sweep planned first"
        return self.plan

    def end(self, outcome: Outcome, cause: Cause, reason: str) -> None:
        self.report.outcome, self.report.cause, self.report.reason = outcome, cause, reason

    def sample(self, intent: AuditBatch, cleared: Collection[str]) -> None:
        """Add the first deleted rows to the report's sample, until it is full."""
        room = self._sample_room()
        if room > 0 and cleared:
            self.report.deleted_sample.extend(intent.confirm(cleared).rows()[:room])

    def sample_planned(self) -> None:
        """A dry run's sample: the rows the plan would delete, each with how long it is unreferenced."""
        plan = self.planned
        for row in plan.rows_to_delete()[: self._sample_room()]:
            record = self.first_seen.get(row.partition, {}).get(row.key)
            unreferenced_ms = 0 if record is None else plan.now_ms - record.at_ms
            self.report.deleted_sample.append(DeletedRow(row.partition, row.key, unreferenced_ms / 1000))

    def _sample_room(self) -> int:
        taken = len(self.report.deleted_sample)
        return (1 << 62) - taken if self.sample_size is None else self.sample_size - taken
