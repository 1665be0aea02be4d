"""A sweeper SIGKILLed mid-delete: no referenced row is lost, its lease fences others until the TTL,
and the next sweep converges (exactly the orphans left go, the audit never names a row twice).

The job's rows live in the session's real TransferQueue; references in a real Redis registry and an
active manifest. Every sweep is the `tq-gc` console script in a subprocess that joins the cluster,
but the one that must run while the dead sweeper's short lease is still held: the same CLI, called
in this process (a fresh process needs ~6 s to import TransferQueue and join Ray).
"""

from __future__ import annotations

import signal
import socket
import time
from collections import Counter
from typing import Any

import pytest
from harness import keys_in, wait_until

from tq_gc.state import RedisState

from .conftest import ADMITTED, DELETE_BATCH, GRACE_S, KILL_AFTER, MANIFESTED, ORPHANS, MakeJob
from .helpers import (
    Processes,
    RecordTiming,
    assert_readable,
    tq_gc_in_process,
    wait_for_deletes,
)

pytestmark = pytest.mark.ray

# Short, so that the test waits little for it to expire; the checks that need it still held take
# under a second after the kill (measured 0.5-0.9 s on a 2-core box, `status` being a subprocess).
LEASE_TTL_S = 5.0


def test_sigkill_mid_delete_then_the_next_sweeps_converge(
    make_job: MakeJob,
    processes: Processes,
    redis_url: str,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
    record_timing: RecordTiming,
) -> None:
    job = make_job(redis_url, lease_ttl_s=LEASE_TTL_S)
    status_args = ("status", "--config", str(job.config), "--json")

    # 1. First sight: every orphan starts its grace, nothing is deleted.
    mark = processes.run(*job.sweep_args())
    marked = time.monotonic()
    assert mark.code == 0, mark.why()
    counts = mark.json()["counts"]
    assert counts["deleted"] == counts["eligible"] == 0, counts
    assert counts["within_grace"] == ORPHANS, counts
    assert counts["referenced"] == {"admissions": ADMITTED, "manifests": MANIFESTED, "tags": 0}, counts
    assert keys_in(tq, job.partition) == job.all_keys
    time.sleep(max(0.0, marked + GRACE_S + 0.2 - time.monotonic()))

    # 2. The deleting sweep, SIGKILLed well into its delete phase.
    victim = processes.start(*job.sweep_args())
    total = len(job.all_keys)
    left_when_seen = wait_for_deletes(tq, job.partition, total, KILL_AFTER, victim, timeout_s=60)
    victim.kill()
    killed = time.monotonic()
    assert victim.process.returncode == -signal.SIGKILL
    record_timing("chaos: victim sweep start -> killed mid-delete", killed - victim.started)

    # Right away, while the dead sweeper's lease has not expired: `status` names it (a process of
    # its own), and a new sweep is fenced off by it (in this process: a fresh one would need longer
    # than the TTL to start).
    status_cli = processes.start(*status_args)
    early = tq_gc_in_process(capsys, *job.sweep_args())
    status = status_cli.wait(timeout_s=30)
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
    assert job.referenced <= left
    assert_readable(tq, job.partition, sorted(job.referenced))
    assert 0 < len(remaining) <= ORPHANS - KILL_AFTER, (len(remaining), left_when_seen)

    # 3. After the TTL, the next sweep deletes exactly the orphans the dead one left.
    state = RedisState.from_url(redis_url, job.namespace)
    try:
        wait_until("the dead sweeper's lease expires", lambda: state.lease_holder() is None, LEASE_TTL_S + 5)
    finally:
        state.close()
    record_timing("chaos: kill -> lease expired", time.monotonic() - killed)
    recover = processes.run(*job.sweep_args())
    assert recover.code == 0, recover.why()
    report = recover.json()
    counts = report["counts"]
    assert report["outcome"] == "completed", report
    assert counts["deleted"] == counts["eligible"] == len(remaining), counts
    assert counts["recheck_saved"] == counts["failed"] == counts["within_grace"] == 0, counts
    assert keys_in(tq, job.partition) == job.referenced
    assert_readable(tq, job.partition, sorted(job.referenced))
    record_timing("chaos: recovering sweep", recover.seconds)

    # 4. The audit names each deleted row at most once. The killed sweep's last batch may be cleared
    # but not audited (the kill can fall between TQ's clear and the audit write): at most one batch.
    audit = processes.run("audit", "--config", str(job.config), "--limit", "100000", "--json", timeout_s=30)
    assert audit.code == 0, audit.why()
    rows = audit.json()["deleted"]
    assert {row["partition"] for row in rows} == {job.partition}
    audited = Counter(row["key"] for row in rows)
    assert max(audited.values()) == 1, [key for key, n in audited.items() if n > 1][:10]
    assert set(audited) <= job.orphans
    by_run = {row["key"]: row["run_id"] for row in rows}
    assert {key for key, run in by_run.items() if run == report["run_id"]} == remaining
    by_victim = {key for key, run in by_run.items() if run != report["run_id"]}
    assert len({by_run[key] for key in by_victim}) <= 1  # one killed run, nothing else deleted
    assert by_victim <= job.orphans - remaining
    assert len(job.orphans - set(audited)) <= DELETE_BATCH

    # 5. Converged: a last sweep finds nothing to do.
    idle = processes.run(*job.sweep_args())
    assert idle.code == 0, idle.why()
    counts = idle.json()["counts"]
    assert counts["deleted"] == counts["eligible"] == counts["within_grace"] == 0, counts
    assert counts["in_scope"] == len(job.referenced), counts
    assert keys_in(tq, job.partition) == job.referenced
    assert_readable(tq, job.partition, sorted(job.referenced))
