"""The state store changes under a deleting sweep: Redis restarted empty (no persistence), or turned
into a read-only replica (a failover that left clients on the old primary). Either way the sweep stops
at once (exit 4) with at most its in-flight batch deleted, no referenced row is deleted, and reruns
converge with every removed row in the audit.

A redis-server of the test's own; the deleting sweep is the `tq-gc` console script in a subprocess.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from harness import keys_in, wait_until

from tools.testbed.redis_server import KillableRedisServer
from tq_gc import AdmissionRegistry

from .conftest import DELETE_BATCH, MakeJob
from .helpers import Job, Processes
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
RENEW_EVERY_S = 0.2
PUBLISHER_TTL_S = 2.0  # above the renew period, below nothing: the rows' safety is the grace's job
SWEEP_EXIT_S = 60.0


class RenewingPublisher(threading.Thread):
    """The job's trainer: holds its admission by renewing it, and re-admits at once when `renew` says
    it is gone (Redis restarted empty)."""

    def __init__(self, url: str, job: Job, admission_id: str) -> None:
        super().__init__(name="renewing-publisher", daemon=True)
        self._registry = AdmissionRegistry.connect(url, namespace=job.namespace)
        self._admission_id, self._rows = admission_id, {job.partition: sorted(job.admitted)}
        self._stop_event = threading.Event()
        self.readmitted = 0
        self.renew_errors = 0
        self._registry.admit(admission_id, self._rows, ttl_seconds=PUBLISHER_TTL_S)

    def run(self) -> None:
        while not self._stop_event.wait(RENEW_EVERY_S):
            try:
                if not self._registry.renew(self._admission_id, ttl_seconds=PUBLISHER_TTL_S):
                    self._registry.admit(self._admission_id, self._rows, ttl_seconds=PUBLISHER_TTL_S)
                    self.readmitted += 1
            except Exception:  # Redis down for a moment: next round
                self.renew_errors += 1

    def close(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)
        self._registry.close()


def test_redis_restarted_empty_mid_delete_publishers_readmit_and_nothing_referenced_is_lost(
    make_job: MakeJob,
    own_redis: KillableRedisServer,
    processes: Processes,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(own_redis.url, lease_ttl_s=LEASE_TTL_S, grace_s=FAULT_GRACE_S)
    publisher = RenewingPublisher(own_redis.url, job, "trainer-step-7")  # replaces make_job's admission
    publisher.start()
    try:
        sweeper, _ = start_deleting_sweep(processes, capsys, tq, job)
        own_redis.restart_empty()  # admissions, lease, first-seen records and audit: all gone
        left_at_restart = keys_in(tq, job.partition)

        result = sweeper.wait(timeout_seconds=SWEEP_EXIT_S)
        assert result.code == 4, result.why()
        assert result.json()["outcome"] == "aborted", result.stdout
        left = keys_in(tq, job.partition)
        assert len(left_at_restart - left) <= DELETE_BATCH, (len(left_at_restart), len(left))
        removed_before_restart = job.all_keys - left
        wait_until("the publisher re-admits", lambda: publisher.readmitted >= 1, timeout_seconds=10)
        assert_referenced_intact(tq, job)

        # Everything is seen for the first time again: nothing may go before a new grace.
        first = in_process_sweep(capsys, job)()
        assert first.code == 0, first.why()
        assert first.json()["counts"]["deleted"] == 0, first.stdout
        converge(in_process_sweep(capsys, job), tq, job)
        assert_referenced_intact(tq, job)
        assert_audit_names_every_removed_row(capsys, tq, job, removed_before_restart)
    finally:
        publisher.close()


def test_redis_read_only_mid_delete_aborts_with_exit_4_and_nothing_referenced_is_lost(
    make_job: MakeJob,
    own_redis: KillableRedisServer,
    processes: Processes,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(own_redis.url, lease_ttl_s=LEASE_TTL_S, grace_s=FAULT_GRACE_S)
    sweeper, _ = start_deleting_sweep(processes, capsys, tq, job)
    own_redis.make_read_only()
    try:
        left_at_failover = keys_in(tq, job.partition)
        result = sweeper.wait(timeout_seconds=SWEEP_EXIT_S)
        assert result.code == 4, result.why()
        report = result.json()
        assert report["outcome"] == "aborted", report
        assert "READONLY" in report["reason"] or "read only" in report["reason"], report
        left = keys_in(tq, job.partition)
        assert len(left_at_failover - left) <= DELETE_BATCH, (len(left_at_failover), len(left))
        assert report["counts"]["deleted"] <= len(job.all_keys) - len(left), report
        assert_referenced_intact(tq, job)
    finally:
        own_redis.make_writable()
    wait_for_free_lease(
        capsys, job, timeout_seconds=LEASE_TTL_S + 5
    )  # the aborted sweep could not release it
    converge(in_process_sweep(capsys, job), tq, job)
    assert_referenced_intact(tq, job)
    assert_audit_names_every_removed_row(capsys, tq, job)
