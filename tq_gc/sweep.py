"""One sweep's state (its lease, plan, records, audit intents and report), and the small mechanics of
a sweep the collector's steps share: how it stops with an outcome, its delete batches, pacing, and the
clock of its report."""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tq_gc.errors import LeaseLost
from tq_gc.model import (
    DELETED_SAMPLE_SIZE,
    AuditBatch,
    Cause,
    FirstSeen,
    Outcome,
    SweepReport,
)
from tq_gc.plan import FirstSeenByPartition, Plan, PlanPolicy
from tq_gc.sightings import audit_intent
from tq_gc.state.base import Lease

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


class SweepStopped(Exception):
    """Ends a sweep early with an outcome and its cause: skipped (lease held, fence) or aborted."""

    def __init__(self, outcome: Outcome, cause: Cause, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.cause = cause
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Batch:
    partition: str
    keys: tuple[str, ...]


@dataclass
class Sweep:
    """One sweep's state, from the lease to the report."""

    report: SweepReport
    policy: PlanPolicy
    progress: Progress | None
    lease: Lease | None = None
    renewed_at: float = 0.0  # time.monotonic() when the lease was last renewed
    fence_epoch: int = 0  # the store's fence epoch before any reference was read
    started_ms: int = 0  # the store's clock when the lease was taken: sweeping resumed then
    plan: Plan | None = None
    # Each planned row's first-seen record: its identity then, and since when it is unreferenced.
    first_seen: FirstSeenByPartition = field(default_factory=dict)

    @property
    def holds_lease(self) -> Lease:
        assert self.lease is not None, "the sweep took its lease first"
        return self.lease

    def intent(self, partition: str, records: Mapping[str, FirstSeen], keys: Sequence[str]) -> AuditBatch:
        """The audit intent of deleting the rows of `keys`, from their first-seen records."""
        assert self.plan is not None, "the sweep planned first"
        return audit_intent(self.report.run_id, partition, records, keys, self.plan.now_ms)

    def sample(self, intent: AuditBatch, cleared: Collection[str]) -> None:
        """Add the first deleted rows to the report's sample, until it is full."""
        room = DELETED_SAMPLE_SIZE - len(self.report.deleted_sample)
        if room > 0 and cleared:
            self.report.deleted_sample.extend(intent.confirm(cleared).rows()[:room])


class LeaseKeeper:
    """Renews a sweep's lease in the background, from when it is taken until the sweep ends: attaching
    to a busy cluster or listing a million rows in paced windows can take longer than the TTL. A paused
    process renews nothing (the thread pauses with it), so a sweeper frozen past its TTL still loses the
    lease and fences itself; a renewal that finds the lease gone ends the keeper, and the sweep's next
    write fails on the token."""

    def __init__(self, renew: Callable[[], object], every_seconds: float) -> None:
        self._renew = renew
        self._every_seconds = every_seconds
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._keep, name="tq-gc-lease-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _keep(self) -> None:
        while not self._stopped.wait(self._every_seconds):
            try:
                self._renew()
            except LeaseLost:
                return
            except Exception as exc:  # a store hiccup: the next renewal may succeed, the TTL decides
                log.warning("could not renew the sweep lease (retrying): %s", exc)


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def end_sweep(report: SweepReport, outcome: Outcome, cause: Cause, reason: str) -> None:
    report.outcome, report.cause, report.reason = outcome, cause, reason


def batches(to_delete: Mapping[str, Sequence[str]], size: int) -> Iterator[Batch]:
    """Batches of one partition each, keeping the plan's order within a partition."""
    for partition, keys in to_delete.items():
        for start in range(0, len(keys), size):
            yield Batch(partition, tuple(keys[start : start + size]))


def stop_if_fenced(fences: Mapping[str, int]) -> None:
    if fences:
        raise SweepStopped(
            Outcome.SKIPPED, Cause.FENCE_UP, f"checkpoint fence up: {', '.join(sorted(fences))}"
        )


def throttle(deleted: int, max_per_second: float, started: float) -> None:
    if max_per_second <= 0:
        return
    wait = deleted / max_per_second - (time.monotonic() - started)
    if wait > 0:
        time.sleep(wait)


@contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """A sweep allocates millions of small objects and makes no reference cycles: the cyclic GC
    only rescans the listing again and again (measured: it doubles the plan's time at 100k rows)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            promote_survivors()
            gc.enable()


def promote_survivors() -> None:
    """Move every object allocated while the collector was off into the oldest generation, without
    walking them: else the first collection after the sweep walks them all, the records kept for the
    next sweep among them, holding the process's interpreter lock (554 ms at 1M rows, beside a job).
    freeze() then unfreeze() splices the generations' lists, O(1). Not when something else froze
    objects: unfreeze() would thaw them too."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
