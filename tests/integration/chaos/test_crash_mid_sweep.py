"""A sweeper SIGKILLed mid-delete: no referenced row is lost, its lease fences others until the TTL,
the grace of the orphans it left restarts (nobody observed them while its lease was held), and the
next sweeps converge: exactly the orphans it left go, the audit names every removed row once.

The job's rows live in the session's real TransferQueue; references in a real Redis registry and an
active manifest. The victim, the recovering and the idle sweep are the `tq-gc` console script in a
subprocess that joins the cluster; the sweeps that mark and keep the rows observed in between, and
the one that must run while the dead sweeper's lease is still held, are the same CLI called in this
process (a fresh process needs seconds to import TransferQueue and join Ray).
"""

from __future__ import annotations

import signal
import socket
import time
from collections import Counter
from typing import Any

import pytest
from harness import keys_in, tq_gc_in_process, wait_until

from tq_gc.state import RedisState

from .conftest import ADMITTED, KILL_AFTER, MANIFESTED, ORPHANS, MakeJob
from .helpers import (
    Processes,
    RecordTiming,
    assert_readable,
    wait_for_deletes,
)
from .properties import (
    FAULT_GRACE_S,
    SUBPROCESS_LEASE_TTL_S,
    Marked,
    assert_audit_names_every_removed_row,
    assert_referenced_intact,
    in_process_dry_run,
    in_process_sweep,
    mark_and_observe,
    observe_until_due,
)

pytestmark = pytest.mark.ray

# Above a subprocess's start-up (the `status` check below is one), and above the grace: while the dead
# sweeper holds it nobody observes, so the orphans it left start their grace again.
LEASE_TTL_S = SUBPROCESS_LEASE_TTL_S


def test_sigkill_mid_delete_then_the_next_sweeps_converge(
    make_job: MakeJob,
    processes: Processes,
    redis_url: str,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
    record_timing: RecordTiming,
) -> None:
    assert LEASE_TTL_S > FAULT_GRACE_S
    job = make_job(redis_url, lease_ttl_s=LEASE_TTL_S, grace_s=FAULT_GRACE_S)
    status_args = ("status", "--config", str(job.config), "--json")
    sweep = in_process_sweep(capsys, job)

    # 1. First sight: every orphan starts its grace, nothing is deleted; then keep them observed.
    marked = Marked.now(job)
    mark = sweep()
    assert mark.code == 0, mark.why()
    counts = mark.json()["counts"]
    assert counts["deleted"] == counts["eligible"] == 0, counts
    assert counts["within_grace"] == ORPHANS, counts
    assert counts["referenced"] == {
        "admissions": ADMITTED,
        "manifests": MANIFESTED,
        "tags": 0,
        "owners": 0,
    }, counts
    assert keys_in(tq, job.partition) == job.all_keys
    observe_until_due(in_process_dry_run(capsys, job), job, marked, ORPHANS)

    # 2. The deleting sweep, SIGKILLed well into its delete phase.
    victim = processes.start(*job.sweep_args(), command=job.cli)
    total = len(job.all_keys)
    left_when_seen = wait_for_deletes(tq, job.partition, total, KILL_AFTER, victim, timeout_seconds=90)
    victim.kill()
    killed = time.monotonic()
    assert victim.process.returncode == -signal.SIGKILL
    record_timing("chaos: victim sweep start -> killed mid-delete", killed - victim.started)

    # Right away, while the dead sweeper's lease has not expired: `status` names it (a process of
    # its own), and a new sweep is fenced off by it (in this process).
    status_cli = processes.start(*status_args)
    early = tq_gc_in_process(capsys, *job.sweep_args(), runtime=job.runtime())
    status = status_cli.wait(timeout_seconds=30)
    checked = time.monotonic()
    assert checked - killed < LEASE_TTL_S * 0.9, f"checks took {checked - killed:.1f} s: raise LEASE_TTL_S"
    record_timing("chaos: kill -> status and a skipped sweep done", checked - killed)
    holder = f"{socket.gethostname()}:{victim.pid}"
    assert status.code == 0, status.why()
    lease = status.json()["lease"]
    assert lease is not None and lease["holder"] == holder, lease
    assert 0 < lease["expires_in_s"] <= LEASE_TTL_S, lease
    assert early.code == 3, early.why()
    report = early.json()
    assert report["outcome"] == "skipped" and holder in report["reason"], report
    assert report["counts"]["deleted"] == 0, report

    # No referenced row lost; the dead sweeper stopped partway.
    left = keys_in(tq, job.partition)
    remaining = left & job.orphans
    assert left <= job.all_keys
    assert_referenced_intact(tq, job)
    assert 0 < len(remaining) <= ORPHANS - KILL_AFTER, (len(remaining), left_when_seen)

    # 3. After the TTL: the orphans left were not observed for longer than a grace, so the next sweep
    # sees them all for the first time again and deletes nothing; a grace of observing later, the
    # next one deletes exactly them.
    state = RedisState.from_url(redis_url, job.namespace)
    try:
        wait_until("the dead sweeper's lease expires", lambda: state.lease_holder() is None, LEASE_TTL_S + 5)
    finally:
        state.close()
    record_timing("chaos: kill -> lease expired", time.monotonic() - killed)
    mark_and_observe(capsys, job, len(remaining))
    recover = processes.run(*job.sweep_args(), command=job.cli)
    assert recover.code == 0, recover.why()
    report = recover.json()
    counts = report["counts"]
    assert report["outcome"] == "completed", report
    assert counts["deleted"] == counts["eligible"] == len(remaining), counts
    assert counts["recheck_saved"] == counts["failed"] == counts["within_grace"] == 0, counts
    assert keys_in(tq, job.partition) == job.referenced
    assert_readable(tq, job.partition, sorted(job.referenced))
    record_timing("chaos: recovering sweep", recover.seconds)

    # 4. The audit names every removed row and none twice as confirmed; the recovering run confirms
    # exactly the rows the dead one left; the dead run (its last batch's intent maybe unconfirmed) is
    # the only other one that deleted, and only orphans.
    assert_audit_names_every_removed_row(capsys, tq, job)
    rows = processes.run(
        "audit", "--config", str(job.config), "--limit", "100000", "--json", timeout_seconds=30
    )
    assert rows.code == 0, rows.why()
    audit = rows.json()["deleted"]
    assert {row["key"] for row in audit} <= job.orphans
    confirmed_by = Counter(row["run_id"] for row in audit if row["confirmed"])
    recovered = {row["key"] for row in audit if row["run_id"] == report["run_id"]}
    assert recovered == remaining
    assert confirmed_by[report["run_id"]] == len(remaining), confirmed_by
    victim_rows = [row for row in audit if row["run_id"] != report["run_id"]]
    assert len({row["run_id"] for row in victim_rows}) == 1  # one killed run, nothing else deleted
    assert {row["key"] for row in victim_rows if row["confirmed"]} <= job.orphans - remaining

    # 5. Converged: a last sweep finds nothing to do.
    idle = processes.run(*job.sweep_args(), command=job.cli)
    assert idle.code == 0, idle.why()
    counts = idle.json()["counts"]
    assert counts["deleted"] == counts["eligible"] == counts["within_grace"] == 0, counts
    assert counts["in_scope"] == len(job.referenced), counts
    assert keys_in(tq, job.partition) == job.referenced
    assert_readable(tq, job.partition, sorted(job.referenced))
