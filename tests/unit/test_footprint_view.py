"""`tq-gc status` and the sweep table on bytes and headroom: read from recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_cli import STAGING, Cli

from tq_gc.cli.footprint_view import footprint_lines, footprint_summary, human_bytes


def run(finished_at: str, orphans: int, active_keys: int, outcome: str = "completed") -> dict[str, Any]:
    return {
        "outcome": outcome,
        "finished_at": finished_at,
        "counts": {"eligible": orphans, "within_grace": 0},
        "bytes": {"orphaned": orphans * 1024, "eligible": orphans * 1024, "within_grace": 0,
                  "referenced": 0, "reclaimed": 0, "sized_rows": orphans, "unsized_rows": 0},
        "storage": {
            "units": [{"unit": "u0", "capacity": 1000, "active_keys": active_keys // 2},
                      {"unit": "u1", "capacity": 1000, "active_keys": active_keys - active_keys // 2}],
            "capacity": 2000, "active_keys": active_keys,
            "headroom": 1 - (active_keys - active_keys // 2) / 1000,
            "free_rows": 1000 - (active_keys - active_keys // 2), "unread": None,
        },
        "warnings": [],
    }  # fmt: skip


def test_status_summary_gives_the_growth_rates_and_minutes_to_full() -> None:
    runs = [  # newest first, as the state store answers
        run("2026-12-04T11:00:00+00:00", 300, 1800),
        run("2026-12-04T10:30:00+00:00", 999, 0, outcome="aborted"),
        run("2026-12-04T10:00:00+00:00", 100, 1000),
    ]

    summary = footprint_summary(runs)

    assert summary["orphan_rows"] == 300 and summary["bytes"]["orphaned"] == 300 * 1024
    assert summary["orphan_rows_per_hour"] == pytest.approx(200.0)
    assert summary["stored_rows_per_hour"] == pytest.approx(800.0)
    # the fullest unit has 100 rows free and takes half of 800 rows/h: 15 min
    assert summary["minutes_to_full"] == pytest.approx(15.0)
    lines = footprint_lines(summary)
    assert any("orphans: 300 rows, 300.0 KiB" in line for line in lines), lines
    assert any("headroom 10.0%" in line for line in lines), lines
    assert any("full in 15 min" in line for line in lines), lines


def test_a_summary_without_runs_says_nothing() -> None:
    summary = footprint_summary([])
    assert summary["bytes"] is None and summary["minutes_to_full"] is None
    assert footprint_lines(summary) == []


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 2**30)] == ["0 B", "1023 B", "1.5 KiB", "5.0 GiB"]


def test_status_and_the_sweep_table_show_orphan_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tmp_path, capsys)
    cli.rows.put(STAGING, "r1/c1", nbytes=2048)
    _code, out, _ = cli.run("sweep")
    assert "orphans: 1 rows, 2.0 KiB (0 B eligible, 2.0 KiB within grace)" in out, out

    _, status = cli.run_json("status")
    assert status["footprint"]["bytes"]["within_grace"] == 2048
    _, out, _ = cli.run("status")
    assert "orphans: 1 rows, 2.0 KiB" in out, out
