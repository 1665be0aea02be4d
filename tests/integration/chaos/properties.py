"""The three properties every fault-matrix test asserts, whatever the fault:

1. no referenced row deleted: every row a live admission or an active manifest holds is still there,
   readable;
2. reruns converge: once the fault is gone, sweeps a grace apart leave exactly the referenced rows and
   end with nothing waiting;
3. the audit (`tq-gc audit --json`) names every removed row, exactly once, and no row that is still
   there.

Sweeps and the audit run through the `tq-gc` CLI, in this process (`tq_gc_in_process`): a fresh
process needs ~6 s to import TransferQueue and join Ray, and converging takes a few sweeps.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis
from harness import (
    SUBPROCESS_LEASE_WITHIN_S,
    SWEEP_TAIL_WITHIN_S,
    CliResult,
    keys_in,
    tq_gc_in_process,
    wait_until,
)

from .conftest import KILL_AFTER, ORPHANS
from .helpers import Cli, Job, Processes, assert_readable, wait_for_deletes

# The fault matrix's grace. Grace accrues only while sweeps observe: a stretch longer than the grace
# from one sweep's plan to the next sweep's lease restarts every row's clock. The longest such stretch
# in these tests: the last observing sweep's tail, then a deleting subprocess starting up to its lease.
FAULT_GRACE_S = SWEEP_TAIL_WITHIN_S + SUBPROCESS_LEASE_WITHIN_S
OBSERVE_EVERY_S = FAULT_GRACE_S / 4  # sweeps in this process keep the rows observed meanwhile
# A subprocess sweep's lease: above the grace (a dead sweeper's lease outlives the orphans' clocks: see
# test_crash_mid_sweep), and above the seconds a subprocess spends joining Ray and attaching to TQ while
# it holds the lease on a loaded 2-core box (5-12 s seen).
SUBPROCESS_LEASE_TTL_S = FAULT_GRACE_S + 5.0
# One sweep in this process, deletes and all (3,000 rows at the chaos duty cycle: seconds unloaded).
SWEEP_WITHIN_S = 60.0
# Converging may start with every clock restarted: a grace of sweeps a quarter grace apart, then the
# deleting one.
CONVERGE_WITHIN_S = 2 * FAULT_GRACE_S + SWEEP_WITHIN_S
AUDIT_LIMIT = "100000"

Sweep = Callable[[], CliResult]


def in_process_sweep(capsys: Any, job: Job) -> Sweep:
    return lambda: tq_gc_in_process(capsys, *job.sweep_args(), runtime=job.runtime())


def in_process_dry_run(capsys: Any, job: Job) -> Sweep:
    """A dry run observes like any sweep (its sightings count towards the grace) and deletes nothing."""
    return lambda: tq_gc_in_process(capsys, *job.dry_run_args(), runtime=job.runtime())


def store_clock_ms(job: Job) -> int:
    """The state store's clock (Redis TIME), the one grace runs on."""
    with redis.Redis.from_url(job.state_url) as client:
        seconds, microseconds = client.time()
    return int(seconds) * 1000 + int(microseconds) // 1000


@dataclass(frozen=True)
class Marked:
    """When the marking sweep began, on the monotonic clock (deadlines) and on the store's (grace): its
    first-seen times, on the store's clock, are later than `store_ms`."""

    monotonic: float
    store_ms: int

    @classmethod
    def now(cls, job: Job) -> Marked:
        return cls(time.monotonic(), store_clock_ms(job))


def mark(sweep: Sweep, job: Job, orphans: int) -> Marked:
    """The first sweep: every orphan seen for the first time, nothing deleted. Returns when it began."""
    began = Marked.now(job)
    result = sweep()
    assert result.code == 0, result.why()
    counts = result.json()["counts"]
    assert counts["deleted"] == counts["eligible"] == 0, counts
    assert counts["within_grace"] == orphans, counts
    return began


def observe_until_due(
    observe: Sweep, job: Job, marked: Marked, orphans: int, grace_s: float = FAULT_GRACE_S
) -> None:
    """Dry runs every OBSERVE_EVERY_S, after the marking sweep that began at `marked`, until one finds
    every orphan due. The rows stay observed, their grace accrues, and a dry run that ends later than the
    grace, however slow, deletes nothing: the grace can run out during one. A dry run that ended before a
    grace had passed since `marked` on the store's clock (the clock grace runs on) must find nothing due."""
    deadline = marked.monotonic + grace_s + CONVERGE_WITHIN_S
    while True:
        time.sleep(OBSERVE_EVERY_S)
        result = observe()
        ended, ended_store_ms = time.monotonic(), store_clock_ms(job)
        assert result.code == 0, result.why()
        report = result.json()
        assert report["outcome"] == "dry_run", report
        counts = report["counts"]
        if ended_store_ms - marked.store_ms < grace_s * 1000:
            assert counts["eligible"] == 0, (
                f"due before its grace ({grace_s:g} s): {counts}; the dry run ended "
                f"{(ended_store_ms - marked.store_ms) / 1000:.3f} s after the marking sweep began on the "
                f"store's clock, {ended - marked.monotonic:.3f} s on the monotonic clock; it ran from "
                f"{report['started_at']} to {report['finished_at']}"
            )
        elif counts["eligible"] == orphans:
            return
        if ended > deadline:
            raise AssertionError(
                f"the orphans are not due {ended - marked.monotonic:.0f} s after marking: {counts}"
            )


def mark_and_observe(capsys: Any, job: Job, orphans: int, grace_s: float = FAULT_GRACE_S) -> None:
    """Mark, then keep the rows observed until the orphans are due: a sweep started right after this,
    in a process of its own, takes its lease within a grace of the last observation and deletes them."""
    marked = mark(in_process_sweep(capsys, job), job, orphans)
    observe_until_due(in_process_dry_run(capsys, job), job, marked, orphans, grace_s)


def lease_holder(capsys: Any, job: Job) -> Any:
    """The lease as `tq-gc status --json` shows it: None when nobody holds it."""
    result = tq_gc_in_process(capsys, "status", "--config", str(job.config), "--json")
    assert result.code == 0, result.why()
    return result.json()["lease"]


def wait_for_free_lease(capsys: Any, job: Job, timeout_seconds: float) -> None:
    """A sweeper that stopped without releasing its lease (its store failed, it died) holds every
    other one off until the lease's TTL runs out."""
    wait_until("the lease is free", lambda: lease_holder(capsys, job) is None, timeout_seconds, poll_s=0.2)


def assert_referenced_intact(tq: Any, job: Job) -> None:
    left = keys_in(tq, job.partition)
    lost = job.referenced - left
    assert not lost, f"{len(lost)} referenced rows deleted: {sorted(lost)[:10]}"
    assert_readable(tq, job.partition, sorted(job.referenced))


def converge(sweep: Sweep, tq: Any, job: Job, grace_s: float = FAULT_GRACE_S) -> list[dict[str, Any]]:
    """Sweep every quarter grace (so that the rows stay observed) until only the referenced rows are
    left and nothing waits out a grace; returns the reports. Every one of these sweeps must complete."""
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + CONVERGE_WITHIN_S
    while True:
        result = sweep()
        assert result.code == 0, result.why()
        report = result.json()
        reports.append(report)
        assert report["outcome"] == "completed", report
        left = keys_in(tq, job.partition)
        if left == job.referenced and report["counts"]["within_grace"] == 0:
            return reports
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not converged after {len(reports)} sweeps: {len(left - job.referenced)} orphans left, "
                f"{len(job.referenced - left)} referenced rows gone; last report: {report}"
            )
        time.sleep(grace_s / 4)


def audited(capsys: Any, job: Job) -> list[dict[str, Any]]:
    """Every row `tq-gc audit --json` names (it lists the newest first, up to the limit)."""
    result = tq_gc_in_process(capsys, "audit", "--config", str(job.config), "--limit", AUDIT_LIMIT, "--json")
    assert result.code == 0, result.why()
    rows: list[dict[str, Any]] = result.json()["deleted"]
    assert len(rows) < int(AUDIT_LIMIT), "raise AUDIT_LIMIT: the audit may hold more rows than were read"
    return rows


def assert_audit_names_every_removed_row(
    capsys: Any, tq: Any, job: Job, removed_before_audit_began: Iterable[str] = ()
) -> None:
    """Every row of the job that is gone is in the audit; none is recorded as deleted twice, and none
    that is still there is recorded as deleted. An entry marked `"confirmed": false` (a delete whose
    intent was written, the sweeper gone before it could confirm) counts as naming its row, and may
    name one that was never cleared. `removed_before_audit_began`: rows deleted before the audit log
    itself was lost (Redis restarted empty), which no audit can name any more."""
    forgotten = set(removed_before_audit_began)
    removed = job.all_keys - keys_in(tq, job.partition) - forgotten
    rows = audited(capsys, job)
    assert {row["partition"] for row in rows} <= {job.partition}, rows[:3]
    named = {row["key"] for row in rows}
    confirmed = Counter(row["key"] for row in rows if row.get("confirmed", True) is not False)
    twice = sorted(key for key, n in confirmed.items() if n > 1)
    assert not twice, f"{len(twice)} rows recorded as deleted more than once: {twice[:10]}"
    unaudited = removed - named
    assert not unaudited, (
        f"{len(unaudited)} of {len(removed)} removed rows are not in the audit: {sorted(unaudited)[:10]}"
    )
    still_there = confirmed.keys() - removed - forgotten
    assert not still_there, (
        f"{len(still_there)} rows recorded as deleted are still there: {sorted(still_there)[:10]}"
    )


def start_deleting_sweep(processes: Processes, capsys: Any, tq: Any, job: Job) -> tuple[Cli, set[str]]:
    """Mark and observe (in this process), then a deleting sweep (a subprocess) until it has deleted
    KILL_AFTER rows; returns it, and the rows left at that moment."""
    mark_and_observe(capsys, job, ORPHANS)
    sweeper = processes.start(*job.sweep_args(), command=job.cli)
    wait_for_deletes(tq, job.partition, len(job.all_keys), KILL_AFTER, sweeper, timeout_seconds=90)
    return sweeper, keys_in(tq, job.partition)
