"""`tq-gc serve` streams the sidecar's sweep log lines: the actor keeps its recent ones, by sequence."""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import MakeConfig, StartSidecar, call, wait_until

pytestmark = pytest.mark.ray


def logged(handle: Any, run_id: str) -> tuple[int, list[str]] | None:
    """The sidecar's log lines from its start, once one names the run."""
    after, lines = call(handle, "log_lines", 0)
    return (after, lines) if any(run_id in line for line in lines) else None


def test_the_sidecar_hands_out_its_sweep_log_lines(make_config: MakeConfig, sidecar: StartSidecar) -> None:
    handle = sidecar(make_config(schedule={"interval_seconds": 3600}))  # sweeps only on sweep_now()
    report = call(handle, "sweep_now")
    after, lines = wait_until("the sweep's log line", lambda: logged(handle, report["run_id"]))
    assert any("up:" in line for line in lines)  # the sidecar's start, then its sweep
    assert call(handle, "log_lines", after)[1] == []
