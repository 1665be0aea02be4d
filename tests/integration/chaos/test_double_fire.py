"""Two `tq-gc sweep --execute` started at the same moment (a CronJob that fires twice, or a manual run
beside it): one sweeps, the other finds the lease held and exits 3 having touched nothing. No row is
deleted twice, nothing referenced is deleted, and the audit names every removed row once."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ORPHANS, MakeJob
from .helpers import Processes
from .properties import (
    FAULT_GRACE_S,
    assert_audit_names_every_removed_row,
    assert_referenced_intact,
    converge,
    in_process_sweep,
    mark_and_observe,
)

pytestmark = pytest.mark.ray


def test_two_sweeps_started_at_once_one_sweeps_the_other_exits_3(
    make_job: MakeJob,
    processes: Processes,
    redis_url: str,
    tq: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(redis_url, lease_ttl_s=30.0, grace_s=FAULT_GRACE_S)
    mark_and_observe(capsys, job, ORPHANS)

    first = processes.start(*job.sweep_args(), command=job.cli)
    second = processes.start(*job.sweep_args(), command=job.cli)
    results = [first.wait(), second.wait()]
    assert sorted(r.code for r in results) == [0, 3], "\n".join(r.why() for r in results)
    done, skipped = sorted(results, key=lambda r: r.code)
    report = skipped.json()
    assert report["outcome"] == "skipped" and "lease held by" in report["reason"], report
    assert report["counts"]["deleted"] == 0, report
    report = done.json()
    assert report["outcome"] == "completed", report
    assert report["counts"]["deleted"] == ORPHANS, report

    assert_referenced_intact(tq, job)
    converge(in_process_sweep(capsys, job), tq, job)
    assert_audit_names_every_removed_row(capsys, tq, job)
