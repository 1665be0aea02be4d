"""Collector.stop() during a long paced listing of a real TransferQueue (the sidecar's shutdown): the
sweep ends at the listing's next request, aborted with cause `stopped`, and deletes nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tools.testbed.tuned_cli import JOB_NEVER_IDLE_MS
from tq_gc.config import parse_config
from tq_gc.report import Cause, Outcome, SweepReport
from tq_gc.state.memory import MemoryState
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.pacing import FixedPacing
from tq_gc.sweep import Collector

pytestmark = pytest.mark.ray

ROWS = 300
JOIN_TIMEOUT_S = 15.0
LISTING_DEADLINE_S = 120.0  # attach and the first requests, on a starved machine


class ListingSeen(TransferQueueRowStore):
    """The TQ store, saying when a sweep starts listing the swept partition."""

    listing = threading.Event()

    def list_keys(self, partition: str) -> dict[str, int]:
        self.listing.set()
        return super().list_keys(partition)


def test_stop_ends_a_sweep_in_its_listing_and_deletes_nothing(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    keys = [f"row-{i}" for i in range(ROWS)]
    put_rows(tq_partition, keys, {"t": 1})
    # Windows of 2-8 indexes and a pause of 99x each request: the listing alone would take minutes (the
    # job never idle: an idle job's controller gets no pauses).
    config = parse_config(
        {
            "namespace": "stop-test",
            "scope": [{"partition": tq_partition, "all_keys": True}],
            "grace_seconds": 0,
            "allow_short_grace": True,
            "limits": {"max_delete_fraction": 1.0},
            "transfer_queue": {"ray_address": ray_cluster.address},
        }
    )
    # As the sidecar holds it: attached on first use, stop() forwarded to the store attached.
    fixed = FixedPacing(batch=8, job_idle_ms=JOB_NEVER_IDLE_MS)
    store = DeferredRowStore(lambda: ListingSeen.attach(config.transfer_queue, duty_cycle=0.01, fixed=fixed))
    try:
        collector = Collector(config, MemoryState("stop-test"), store, holder="test")
        reports: list[SweepReport] = []
        sweeper = threading.Thread(target=lambda: reports.append(collector.sweep(dry_run=False)))
        ListingSeen.listing.clear()
        sweeper.start()
        assert ListingSeen.listing.wait(LISTING_DEADLINE_S), "the sweep never started listing"
        collector.stop()
        sweeper.join(timeout=JOIN_TIMEOUT_S)

        assert not sweeper.is_alive(), "the sweep went on listing after stop()"
        (report,) = reports
        assert (report.outcome, report.cause) == (Outcome.ABORTED, Cause.STOPPED), report.to_dict()
        assert report.counts.deleted == 0
        assert set(tq.kv_list(tq_partition)[tq_partition]) == set(keys)
        assert collector.sweep(dry_run=False).cause == Cause.STOPPED  # every later sweep at once
    finally:
        store.close()
