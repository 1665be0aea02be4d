"""The longest TQ request of a sweep: the row store times its own requests, the collector reads them into
the report (longest_tq_request) once per sweep. The memory store keeps none."""

from __future__ import annotations

import uuid

import pytest

from tq_gc.cli import render
from tq_gc.config import parse_config
from tq_gc.report import LongestRequest, SweepReport
from tq_gc.state.memory import MemoryState
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.sweep import Collector

PARTITION = "rollout_staging"


class TimedStore(MemoryRowStore):
    """A memory store that says its calls were TQ requests of given lengths."""

    def __init__(self) -> None:
        super().__init__()
        self.stats: dict[str, list[float]] = {}

    def list_keys(self, partition: str) -> dict[str, int]:
        self.stats.setdefault("kv_retrieve_keys", []).extend([0.004, 0.0125])
        return super().list_keys(partition)

    def take_request_stats(self) -> dict[str, list[float]]:
        taken, self.stats = self.stats, {}
        return taken


def collector(store: MemoryRowStore) -> Collector:
    config = parse_config(
        {"namespace": f"ns-{uuid.uuid4().hex[:6]}", "scope": [{"partition": PARTITION, "all_keys": True}]}
    )
    return Collector(config, MemoryState(config.namespace), store, holder="test")


def test_the_report_names_the_longest_request_of_its_own_sweep_only() -> None:
    store = TimedStore()
    store.put(PARTITION, "a", {"t": 1})
    store.stats = {"clear_samples": [9.0]}  # made before the sweep: not its own

    report = collector(store).sweep(dry_run=True)

    assert report.longest_tq_request == LongestRequest("kv_retrieve_keys", 12.5)
    assert report.to_dict()["longest_tq_request"] == {"op": "kv_retrieve_keys", "ms": 12.5}
    assert report.tq_request_seconds == {"kv_retrieve_keys": [0.004, 0.0125]}
    assert store.stats == {}


def test_a_store_that_times_nothing_reports_no_longest_request() -> None:
    report = collector(MemoryRowStore()).sweep(dry_run=True)
    assert report.longest_tq_request is None
    assert report.to_dict()["longest_tq_request"] is None


def test_the_longest_request_survives_the_run_record() -> None:
    report = SweepReport(run_id="r", namespace="n", dry_run=True)
    report.record_tq_requests(
        {"kv_retrieve_keys": [0.001], "get_partition_index_range": [0.0205, 0.003], "x": []}
    )
    again = SweepReport.from_dict(report.to_dict())
    assert again.longest_tq_request == LongestRequest("get_partition_index_range", 20.5)
    assert SweepReport.from_dict({**report.to_dict(), "longest_tq_request": None}).longest_tq_request is None


class PacedStore(MemoryRowStore):
    """A memory store that says it waited before its requests, as a paced TQ store does."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: dict[str, float] = {}

    def list_keys(self, partition: str) -> dict[str, int]:
        self.waits["quiet_wait"] = self.waits.get("quiet_wait", 0.0) + 0.25
        self.waits["duty_pause"] = self.waits.get("duty_pause", 0.0) + 0.0405
        return super().list_keys(partition)

    def take_pacing_stats(self) -> dict[str, float]:
        taken, self.waits = self.waits, {}
        return taken


def test_the_report_says_how_long_its_own_sweep_waited_by_the_stores_pacing() -> None:
    store = PacedStore()
    store.put(PARTITION, "a", {"t": 1})
    store.waits = {"quiet_wait": 9.0}  # waited before the sweep: not its own

    report = collector(store).sweep(dry_run=True)

    assert report.pacing_ms == {"quiet_wait": 250.0, "duty_pause": 40.5}
    assert report.to_dict()["pacing_ms"] == {"quiet_wait": 250.0, "duty_pause": 40.5}
    assert SweepReport.from_dict(report.to_dict()).pacing_ms == report.pacing_ms
    assert store.waits == {}


def test_a_store_that_does_not_pace_reports_no_waits() -> None:
    report = collector(MemoryRowStore()).sweep(dry_run=True)
    assert report.pacing_ms == {}
    assert report.to_dict()["pacing_ms"] == {}
    assert SweepReport.from_dict({**report.to_dict(), "pacing_ms": None}).pacing_ms == {}


def test_the_text_report_says_how_long_the_pacing_waited(capsys: pytest.CaptureFixture[str]) -> None:
    store = PacedStore()
    store.put(PARTITION, "a", {"t": 1})
    render.sweep_report(collector(store).sweep(dry_run=True).to_dict())
    out = capsys.readouterr().out
    assert "pacing: quiet_wait 250 ms, duty_pause 40 ms" in out, out

    render.sweep_report(collector(MemoryRowStore()).sweep(dry_run=True).to_dict())
    assert "pacing" not in capsys.readouterr().out
