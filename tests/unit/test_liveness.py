"""Liveness from run summaries (tq_gc/liveness.py): shares by outcome and cause over the last hour, the
newest sweeps in a row that did not get through, and how long a checkpoint being written has blocked."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tq_gc.cli.commands import main
from tq_gc.liveness import NO_CAUSE, liveness
from tq_gc.metrics import SweepMetrics
from tq_gc.state.memory import MemoryState
from tq_gc.stores import MemoryRowStore
from tq_gc.wiring import Runtime

from support.baseline import with_old_baseline

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
BLOCKING = "checkpoint being written beside the manifests of '/ckpt/**': /ckpt/tmp_step_7"


def run(
    minutes_ago: float, outcome: str, cause: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    started = NOW - timedelta(minutes=minutes_ago)
    return {"outcome": outcome, "cause": cause, "reason": reason, "started_at": started.isoformat()}


def test_shares_count_the_last_hour_by_outcome_and_cause() -> None:
    runs = [
        run(1, "skipped", "checkpoint_in_progress", BLOCKING),
        run(2, "aborted", "source_failed"),
        run(3, "completed"),
        run(4, "dry_run"),
        run(61, "aborted", "source_failed"),  # older than the hour
        {"outcome": "completed", "started_at": "not a time"},
    ]
    found = liveness(runs, NOW)
    assert found.sweeps == 4
    assert found.shares == {
        ("skipped", "checkpoint_in_progress"): 0.25,
        ("aborted", "source_failed"): 0.25,
        ("completed", NO_CAUSE): 0.25,
        ("dry_run", NO_CAUSE): 0.25,
    }
    assert found.share("completed", "dry_run") == pytest.approx(0.5)
    assert found.since_completed == 2


def test_a_checkpoint_being_written_blocks_from_the_first_skip_of_the_newest_streak() -> None:
    runs = [run(minutes, "skipped", "checkpoint_in_progress", BLOCKING) for minutes in (1, 2, 3)]
    runs += [run(4, "completed"), run(5, "skipped", "checkpoint_in_progress", "older")]
    found = liveness(runs, NOW)
    assert found.blocked is not None
    assert (found.blocked.sweeps, found.blocked.seconds, found.blocked.reason) == (3, 180.0, BLOCKING)
    assert found.since_completed == 3
    assert found.to_dict()["checkpoint_blocking"] == {"sweeps": 3, "seconds": 180.0, "reason": BLOCKING}


def test_a_fresh_store_rebuilding_its_baseline_is_no_stalled_sweeper() -> None:
    """A new job (or a store restarted empty) skips for one grace by design while the store's record of
    its sources is new: those skips neither count in the streak nor end it."""
    rebuilding = [run(minutes, "skipped", "baseline_rebuilding") for minutes in range(1, 16)]
    assert liveness(rebuilding, NOW).since_completed == 0
    runs = [run(0.5, "aborted", "source_failed"), *rebuilding, run(16, "aborted", "source_failed")]
    assert liveness(runs, NOW).since_completed == 2
    assert liveness(rebuilding, NOW).shares == {("skipped", "baseline_rebuilding"): 1.0}


def test_no_runs_is_no_sweep_and_nothing_blocked() -> None:
    found = liveness([], NOW)
    assert (found.sweeps, found.shares, found.since_completed, found.blocked) == (0, {}, 0, None)
    assert liveness([run(1, "completed")], NOW).blocked is None


def test_the_gauges_follow_the_newest_liveness_and_zero_causes_gone_from_the_hour() -> None:
    metrics = SweepMetrics()
    blocked = [run(minutes, "skipped", "checkpoint_in_progress", BLOCKING) for minutes in (1, 2)]
    metrics.observe_liveness(liveness([*blocked, run(3, "completed")], NOW))
    value = metrics.registry.get_sample_value
    assert value("tqgc_sweep_share", {"outcome": "skipped", "cause": "checkpoint_in_progress"}) == 2 / 3
    assert value("tqgc_sweeps_since_completed") == 2 and value("tqgc_checkpoint_blocking_seconds") == 120
    metrics.observe_liveness(liveness([run(1, "completed")], NOW))
    assert value("tqgc_sweep_share", {"outcome": "skipped", "cause": "checkpoint_in_progress"}) == 0
    assert value("tqgc_sweep_share", {"outcome": "completed", "cause": NO_CAUSE}) == 1
    assert value("tqgc_sweeps_since_completed") == 0 and value("tqgc_checkpoint_blocking_seconds") == 0


def test_status_shows_the_last_hours_sweeps_by_outcome_and_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "ckpt" / "gc-manifest.json"
    manifest.parent.mkdir()
    config = tmp_path / "gc.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "namespace": "job-1",
                "scope": [{"partition": "staging", "all_keys": True}],
                "manifests": [{"glob": f"{tmp_path}/ckpt/*.json"}],
            }
        )
    )
    runtime = Runtime(with_old_baseline(MemoryState("job-1")), MemoryRowStore())
    manifest.write_text("[")  # unparsable: the sweep aborts, source_failed
    assert main(["sweep", "--config", str(config)], runtime) == 4
    manifest.unlink()
    assert main(["sweep", "--config", str(config)], runtime) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(config), "--json"], runtime) == 0
    found = json.loads(capsys.readouterr().out)["liveness"]
    assert found["sweeps"] == 2 and found["since_completed"] == 0
    assert {(s["outcome"], s["cause"]): s["share"] for s in found["shares"]} == {
        ("aborted", "source_failed"): 0.5,
        ("dry_run", NO_CAUSE): 0.5,
    }
    assert main(["status", "--config", str(config)], runtime) == 0
    assert "sweeps, last hour (2): dry_run 50%; aborted source_failed 50%" in capsys.readouterr().out
