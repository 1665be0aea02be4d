"""A process frozen (SIGSTOP) mid-delete, then resumed: the sweeper itself, for longer than its lease
TTL while another sweeper takes over; or the job's TQ controller, for longer than the sweeper's lease.

A frozen sweeper that wakes up has lost its lease: it must stop before its next delete, delete at most
the batch it was in, and write nothing more to the state store (no first-seen record, audit entry or
run record over the new holder's). Whatever the freeze, no referenced row is deleted, reruns converge
and the audit names every removed row.

The controller is the session's (pytest plays the job): frozen for seconds and always resumed, it
comes back as it was. The sweeper is the `tq-gc` console script in a subprocess.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import ray
from harness import keys_in

from .conftest import DELETE_BATCH, MakeJob
from .helpers import Processes, redis_snapshot
from .properties import (
    FAULT_GRACE_S,
    SUBPROCESS_LEASE_TTL_S,
    assert_audit_names_every_removed_row,
    assert_referenced_intact,
    converge,
    in_process_sweep,
    start_deleting_sweep,
    wait_for_free_lease,
)

pytestmark = pytest.mark.ray

LEASE_TTL_S = SUBPROCESS_LEASE_TTL_S
FROZEN_PAST_LEASE_S = LEASE_TTL_S + 2.0
SWEEP_EXIT_S = 90.0


def test_sweeper_frozen_past_its_lease_writes_nothing_more_and_deletes_at_most_its_batch(
    make_job: MakeJob,
    processes: Processes,
    redis_url: str,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(redis_url, lease_ttl_s=LEASE_TTL_S, grace_s=FAULT_GRACE_S)
    stale, _ = start_deleting_sweep(processes, capsys, tq, job)
    os.killpg(stale.pid, signal.SIGSTOP)
    try:
        wait_for_free_lease(capsys, job, timeout_seconds=LEASE_TTL_S + 5)
        takeover = in_process_sweep(capsys, job)()
        assert takeover.code == 0, takeover.why()
        assert takeover.json()["outcome"] == "completed", takeover.stdout
        state_before_resume = redis_snapshot(redis_url)
        left_before_resume = keys_in(tq, job.partition)
    finally:
        os.killpg(stale.pid, signal.SIGCONT)

    result = stale.wait(timeout_seconds=SWEEP_EXIT_S)
    assert result.code == 4, result.why()
    assert result.json()["outcome"] == "aborted", result.stdout
    left = keys_in(tq, job.partition)
    assert len(left_before_resume - left) <= DELETE_BATCH, (len(left_before_resume), len(left))
    state_after = redis_snapshot(redis_url)
    changed = sorted(
        key for key in state_before_resume.keys() | state_after.keys()
        if state_before_resume.get(key) != state_after.get(key)
    )  # fmt: skip
    assert not changed, f"the sweeper that lost its lease wrote to the state store: {changed}"
    assert_referenced_intact(tq, job)

    converge(in_process_sweep(capsys, job), tq, job)
    assert_referenced_intact(tq, job)
    assert_audit_names_every_removed_row(capsys, tq, job)


def controller_pid() -> int:
    controller = ray.get_actor("TransferQueueController", namespace="transfer_queue")
    pid = ray.get(controller.__ray_call__.remote(lambda _self: os.getpid()), timeout=30)
    return int(pid)


def test_tq_controller_frozen_mid_delete_then_resumed(
    make_job: MakeJob,
    processes: Processes,
    redis_url: str,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(redis_url, lease_ttl_s=LEASE_TTL_S, grace_s=FAULT_GRACE_S)
    pid = controller_pid()
    sweeper, _ = start_deleting_sweep(processes, capsys, tq, job)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(FROZEN_PAST_LEASE_S)
    finally:
        os.kill(pid, signal.SIGCONT)

    result = sweeper.wait(timeout_seconds=SWEEP_EXIT_S)
    assert result.code in (0, 4), result.why()
    assert result.json()["outcome"] == ("completed" if result.code == 0 else "aborted"), result.stdout
    assert_referenced_intact(tq, job)

    wait_for_free_lease(capsys, job, timeout_seconds=LEASE_TTL_S + 5)
    converge(in_process_sweep(capsys, job), tq, job)
    assert_referenced_intact(tq, job)
    assert_audit_names_every_removed_row(capsys, tq, job)
