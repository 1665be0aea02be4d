"""The sidecar shut down while its sweep deletes: the sweep stops between two delete batches (aborted,
cause `stopped`, its report counting every row it deleted), shutdown() returns only once it has, and
nothing is deleted after. No referenced row is lost, reruns converge, the audit names every removed row.

The sidecar is a real actor in the session's cluster, sweeping on its schedule (which keeps the rows
observed through the grace); its delete phase is slowed by the duty cycle, not by a fake store.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import yaml
from harness import SWEEP_TAIL_WITHIN_S, keys_in, wait_until

from tools.testbed.tuned_cli import JOB_NEVER_IDLE_MS, row_store_factory
from tq_gc.sidecar.client import start_sidecar, stop_sidecar

from .conftest import DELETE_BATCH, KILL_AFTER, MAX_DELETES_PER_SECOND, ORPHANS, MakeJob
from .helpers import Job
from .properties import (
    assert_audit_names_every_removed_row,
    assert_referenced_intact,
    audited,
    converge,
    in_process_sweep,
)

pytestmark = pytest.mark.ray

# The sidecar sweeps every INTERVAL_S, in its own long-running process. From one sweep's plan to the
# next one's lease: the sweep's tail (first sight of 3,120 rows records each one's identity), then the
# schedule's next fire. Longer than the grace, and every row's clock restarts: nothing is ever due.
INTERVAL_S = 0.5
GRACE_S = SWEEP_TAIL_WITHIN_S + INTERVAL_S
CALL_TIMEOUT_S = 60.0
# After shutdown returned, nothing is deleted: watched this long, many batches' time at the chaos duty
# cycle (a batch takes ~20 times its few ms of requests).
QUIET_SECONDS = 2.0


@pytest.fixture
def sidecars() -> Iterator[list[Any]]:
    """Sidecar handles the test started: each one stopped (shutdown, then killed) at the end."""
    handles: list[Any] = []
    yield handles
    for handle in handles:
        stop_sidecar(handle, timeout_seconds=10)


def sidecar_config(job: Job) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(job.config.read_text())
    values["grace_seconds"] = GRACE_S
    values["schedule"] = {"interval_seconds": INTERVAL_S}
    return values


def test_sidecar_shutdown_mid_delete_stops_between_batches(
    make_job: MakeJob,
    redis_url: str,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
    sidecars: list[Any],
) -> None:
    job = make_job(redis_url, grace_s=GRACE_S)
    config = sidecar_config(job)
    handle = start_sidecar(
        config,
        row_store_factory=row_store_factory(job.batch, job_idle_ms=JOB_NEVER_IDLE_MS),
        duty_cycle=job.duty_cycle,
        name=f"tq-gc-chaos-{uuid.uuid4().hex[:8]}",  # a name of its own in the tests' shared cluster
    )
    sidecars.append(handle)
    total = len(job.all_keys)
    wait_until(
        f"the sidecar deletes {KILL_AFTER} rows",
        lambda: len(keys_in(tq, job.partition)) <= total - KILL_AFTER,
        timeout_seconds=60,
        poll_s=0.02,
    )
    reading = time.monotonic()
    left_when_asked = keys_in(tq, job.partition)
    asked = time.monotonic()
    ray.get(handle.shutdown.remote(), timeout=CALL_TIMEOUT_S)  # returns once the sweep has stopped
    left_at_shutdown = keys_in(tq, job.partition)

    # Between batches: at most the batch in flight when it was asked, one that may have begun before
    # the call arrived, and those the duty cycle let through while this test read TQ (a slow read on a
    # busy machine: at the most rows a second it can let through); nothing at all once shutdown returned.
    while_reading = math.ceil((asked - reading) * MAX_DELETES_PER_SECOND / DELETE_BATCH)
    assert len(left_when_asked - left_at_shutdown) <= (2 + while_reading) * DELETE_BATCH
    assert left_at_shutdown & job.orphans, "the sweep finished before it was stopped: slow it down"
    time.sleep(QUIET_SECONDS)
    assert keys_in(tq, job.partition) == left_at_shutdown
    assert_referenced_intact(tq, job)

    last = ray.get(handle.status.remote(), timeout=CALL_TIMEOUT_S)["last_reports"][0]
    assert (last["outcome"], last["cause"]) == ("aborted", "stopped"), last
    assert 0 < last["counts"]["deleted"] < ORPHANS, last["counts"]
    # Its report counts exactly the rows its audit confirms, all removed before shutdown returned.
    by_stopped_sweep = {
        row["key"] for row in audited(capsys, job) if row["run_id"] == last["run_id"] and row["confirmed"]
    }
    assert len(by_stopped_sweep) == last["counts"]["deleted"], (len(by_stopped_sweep), last["counts"])
    assert by_stopped_sweep <= job.orphans - left_at_shutdown

    converge(in_process_sweep(capsys, job), tq, job, grace_s=GRACE_S)
    assert_referenced_intact(tq, job)
    assert_audit_names_every_removed_row(capsys, tq, job)
