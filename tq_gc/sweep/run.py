"""One sweep's state, from the lease to the report: what the sweep's parts (observe, first_seen,
delete, lease) read and write as the sweep goes."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from tq_gc.audit import AuditBatch
from tq_gc.plan import FirstSeenByPartition, Plan, PlanPolicy
from tq_gc.report import DELETED_SAMPLE_SIZE, Cause, Outcome, SweepReport
from tq_gc.state.base import Lease

Progress = Callable[[int, int], None]


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
        room = DELETED_SAMPLE_SIZE - len(self.report.deleted_sample)
        if room > 0 and cleared:
            self.report.deleted_sample.extend(intent.confirm(cleared).rows()[:room])
