"""The benchmarks' configs load: each bench builds its tq-gc config with bench/common.py's config_for, and
a config key a release removed would stop every bench at its start."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import DataSet, config_for


def test_the_bench_config_loads_with_and_without_overrides(tmp_path: Path) -> None:
    data = DataSet(1000, 10, 2, tmp_path)
    assert config_for(data).grace_seconds > 0
    scheduled = config_for(data, "memory://", schedule={"interval_seconds": 0.25})
    assert scheduled.schedule.interval_seconds == 0.25


def test_the_live_bench_can_start_its_sidecars_with_the_change_journal() -> None:
    from live_traffic import Bench, parse_args

    assert parse_args([]).change_journal is False
    assert parse_args(["--change-journal"]).change_journal is True
    journal = {"by": "journal", "why": None, "indexes_reread": 3}
    full = {"by": "full", "why": "no listing kept from an earlier sweep", "indexes_reread": None}
    reports = [
        {"counts": {"deleted": 1}, "outcome": "completed", "phases_ms": {}, "listings": {"p": journal}},
        {"counts": {"deleted": 2}, "outcome": "completed", "phases_ms": {}, "listings": {"p": full}},
        {"counts": {"deleted": 0}, "outcome": "skipped", "phases_ms": {}, "listings": {}},
    ]
    assert Bench.sweeps(reports)["listings"] == {"journal": 1, "full": 1}
