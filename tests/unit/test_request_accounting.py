"""The longest TQ request of a sweep: the row store times its own requests, the collector reads them into
the report (longest_tq_request) once per sweep. The memory store keeps none."""

from __future__ import annotations

import uuid

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
