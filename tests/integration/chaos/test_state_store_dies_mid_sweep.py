"""The state store (Redis) dies mid-delete: the sweep stops at once, aborted (exit 4, one JSON report),
and deletes nothing more than the batch already in flight. No referenced row is touched.

A redis-server of the test's own is SIGKILLed once the sweep (the `tq-gc` console script in a
subprocess, against the session's real TransferQueue) has deleted a good part of the orphans. Sweeps
in this process mark the orphans and keep them observed until then (grace counts only observed time).
"""

from __future__ import annotations

import signal
import time
from datetime import datetime
from typing import Any

import pytest
from harness import keys_in

from tools.testbed.redis_server import KillableRedisServer
from tq_gc.state.redis_connection import CONNECT_TIMEOUT_SECONDS, SOCKET_TIMEOUT_SECONDS

from .conftest import DELETE_BATCH, MakeJob
from .helpers import Processes, RecordTiming, assert_readable
from .properties import FAULT_GRACE_S, start_deleting_sweep

pytestmark = pytest.mark.ray

# The most a sweep may spend on the state store once it has failed: the failing call, then the run
# record and the lease release, each failing too (measured with a frozen Redis, SIGSTOP: 10 s each,
# ~32 s to exit; a dead one refuses connections at once: ~2.5 s to exit, mostly Ray's shutdown).
ABORT_WITHIN_S = 3 * (CONNECT_TIMEOUT_SECONDS + SOCKET_TIMEOUT_SECONDS)


def test_redis_killed_mid_delete_aborts_and_deletes_nothing_more(
    make_job: MakeJob,
    own_redis: KillableRedisServer,
    processes: Processes,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
    record_timing: RecordTiming,
) -> None:
    job = make_job(own_redis.url, grace_s=FAULT_GRACE_S)
    total = len(job.all_keys)

    sweeper, _ = start_deleting_sweep(processes, capsys, tq, job)  # marks: every orphan within grace
    own_redis.signal(signal.SIGKILL)
    died, died_wall = time.monotonic(), time.time()
    left_at_death = keys_in(tq, job.partition)

    result = sweeper.wait(timeout_seconds=ABORT_WITHIN_S + 30)
    exited = time.monotonic()
    assert result.code == 4, result.why()
    report = result.json()  # exactly one JSON document on stdout
    assert report["outcome"] == "aborted", report
    assert "state store" in report["reason"], report
    # A dead Redis refuses at once: the sweep decides to stop without waiting out any timeout.
    aborted_after = datetime.fromisoformat(report["finished_at"]).timestamp() - died_wall
    assert aborted_after < CONNECT_TIMEOUT_SECONDS, (aborted_after, result.why())
    assert exited - died < ABORT_WITHIN_S, result.why()
    record_timing("chaos: Redis SIGKILLed -> sweep aborted (report)", aborted_after)
    record_timing("chaos: Redis SIGKILLed -> sweep process exited", exited - died)

    # Nothing deleted after Redis died but the batch that was in flight.
    left = keys_in(tq, job.partition)
    assert left <= left_at_death
    assert len(left_at_death - left) <= DELETE_BATCH, (len(left_at_death), len(left))
    assert report["counts"]["deleted"] <= total - len(left), report
    # Referenced rows: all there, all readable.
    assert job.referenced <= left
    assert_readable(tq, job.partition, sorted(job.referenced))
    time.sleep(0.5)
    assert keys_in(tq, job.partition) == left
