"""Overlapping triggers never run two sweeps at once in one sidecar, and a sweep that raises is logged
and counted while the schedule goes on. The row stores injected here wrap the real TQ store."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from harness import keys_in

from .helpers import MakeConfig, RecordTiming, StartSidecar, call, reports, scrape, wait_until
from .remote_side import failing_tq_store, max_concurrency, slow_tq_store

pytestmark = pytest.mark.ray

LISTING_S = 2.0  # longer than the 0.5 s interval (ticks keep coming while a sweep runs), and than a stall


def test_sweep_now_during_a_scheduled_sweep_waits_for_it(
    make_config: MakeConfig, sidecar: StartSidecar, tmp_path: Path, record_timing: RecordTiming
) -> None:
    events = tmp_path / "listings"
    factory = functools.partial(slow_tq_store, delay_s=LISTING_S, events=str(events))
    handle = sidecar(make_config(), factory)
    wait_until("a scheduled sweep in progress", lambda: call(handle, "status")["sweeping"])

    asked = time.monotonic()
    pending = handle.sweep_now.remote()
    status = call(handle, "status")  # served by another of the actor's threads meanwhile
    record_timing("status() while sweeps run", time.monotonic() - asked)
    assert status["sweeping"] is True
    assert not ray.wait([pending], timeout=0)[0], "status() waited for sweep_now()"
    report = ray.get(pending, timeout=60)
    record_timing("sweep_now() issued during a scheduled sweep", time.monotonic() - asked)
    wait_until("a scheduled sweep after it", lambda: max_concurrency(events)[1] >= 3)

    peak, _ = max_concurrency(events)
    assert peak == 1, f"{peak} sweeps ran at once"
    assert report["outcome"] == "completed"
    assert sum(1 for r in reports(handle) if r["run_id"] == report["run_id"]) == 1


def test_a_sweep_that_raises_is_counted_and_the_schedule_goes_on(
    make_config: MakeConfig, sidecar: StartSidecar, tq: Any, tq_partition: str, put_rows: Any, tmp_path: Path
) -> None:
    put_rows(tq_partition, ["orphan/1"])
    broken, failures = tmp_path / "broken", tmp_path / "failures"
    broken.touch()
    factory = functools.partial(failing_tq_store, fail_while=str(broken), failures=str(failures))
    handle = sidecar(make_config(), factory, metrics_port=0)

    failed = call(handle, "sweep_now")  # an unforeseen error ends the sweep aborted, never completed
    assert (failed["outcome"], failed["cause"]) == ("aborted", "error")
    assert failed["reason"].startswith("RuntimeError: injected listing failure")
    wait_until("two scheduled sweeps failed too", lambda: failures.read_text().count("\n") >= 3)
    broken.unlink()
    wait_until("the schedule went on and reclaimed the orphan", lambda: not keys_in(tq, tq_partition))

    status = call(handle, "status")
    assert "injected listing failure" in status["last_error"]["error"]
    completed = [r for r in status["last_reports"] if r["outcome"] == "completed"]
    errors = [r for r in status["last_reports"] if r["cause"] == "error"]
    assert completed and len(completed) + len(errors) == len(status["last_reports"])
    metrics = scrape(status["metrics_port"])
    assert metrics[("tqgc_sweep_errors_total", ())] == failures.read_text().count("\n")
    assert metrics[("tqgc_sweeps_total", (("outcome", "completed"),))] >= len(completed)
