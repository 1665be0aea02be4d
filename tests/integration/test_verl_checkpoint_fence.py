"""verl's `_save_checkpoint` (its `tq.save_checkpoint`) under the trainer integration's checkpoint fence: TQ
documents that a save is not consistent under concurrent clears, so no delete batch of a sweep may run
while the trainer saves. A sweep with many small delete batches runs in a thread; verl's save starts while
it deletes, and waits inside the save until either another batch starts (the overlap) or the sweep ends."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_verl_replay_buffer import GRACE_S, INTERVAL_S, Sidecar, example_config, keys

from tools.testbed.verl_job import VerlShapedTrainer
from tq_gc.integrations.verl import TqGcTrainerMixin
from tq_gc.publish.client import GcClient
from tq_gc.report import Outcome
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.pacing import FixedPacing
from tq_gc.sweep import Collector

pytestmark = pytest.mark.ray

ORPHANS = 40
WAIT_S = 120.0


class Timeline:
    """Begin and end events of deletes and saves, in the order they happened."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.changed = threading.Condition()

    def mark(self, what: str, edge: str) -> None:
        with self.changed:
            self.events.append((what, edge))
            self.changed.notify_all()

    def count(self, what: str, edge: str) -> int:
        return self.events.count((what, edge))

    def overlaps(self) -> list[int]:
        """Indexes of events where a delete and a save were both in progress."""
        running = {"delete": 0, "save": 0}
        found = []
        for index, (what, edge) in enumerate(self.events):
            running[what] += 1 if edge == "begin" else -1
            if running["delete"] and running["save"]:
                found.append(index)
        return found


class RecordedStore(TransferQueueRowStore):
    timeline: Timeline

    def delete_if_unchanged(self, partition: str, expected: Any) -> set[str]:
        self.timeline.mark("delete", "begin")
        try:
            return super().delete_if_unchanged(partition, expected)
        finally:
            self.timeline.mark("delete", "end")


def test_no_delete_batch_runs_while_verl_saves_its_checkpoint(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, tmp_path: Path
) -> None:
    timeline = Timeline()
    val_partition = f"tqgc-val-{uuid.uuid4().hex[:10]}"  # never written: verl has not validated
    config = example_config(ray_cluster.address, tq_partition, val_partition, max_delete_fraction=1.0)
    # batches of one row: the store sizes them
    with RecordedStore.attach(config.transfer_queue, fixed=FixedPacing(batch=1)) as store:
        store.timeline = timeline
        sidecar = Sidecar(config, store)
        sweep_over = threading.Event()

        class SavesWhileDeletesRun(VerlShapedTrainer):
            def _save_checkpoint(self) -> Path:
                timeline.mark("save", "begin")
                begun = timeline.count("delete", "begin")
                with timeline.changed:  # a save of a large model lasts long: any batch due meanwhile runs
                    assert timeline.changed.wait_for(
                        lambda: timeline.count("delete", "begin") > begun or sweep_over.is_set(), WAIT_S
                    )
                try:
                    return super()._save_checkpoint()
                finally:
                    timeline.mark("save", "end")

        class Trainer(TqGcTrainerMixin, SavesWhileDeletesRun):
            def tq_gc_client(self) -> GcClient:
                return sidecar.client()

        trainer = Trainer(tq, tq_partition, val_partition, tmp_path / "ckpt")
        orphans = [f"{uuid.uuid4()}_0_0" for _ in range(ORPHANS)]
        put_rows(tq_partition, orphans)
        for _ in range(GRACE_S // INTERVAL_S + 1):  # dry runs watch the orphans through their grace
            sidecar.clock.advance(INTERVAL_S)
            report = Collector(config, sidecar.state, store, holder="test").sweep(dry_run=True)
            assert report.outcome is Outcome.DRY_RUN, report.reason
        assert report.counts.eligible == ORPHANS
        reports: list[Any] = []

        def sweep() -> None:
            try:
                reports.append(sidecar.sweep())
            finally:
                sweep_over.set()

        sweeper = threading.Thread(target=sweep, daemon=True)
        sweeper.start()
        with timeline.changed:
            assert timeline.changed.wait_for(lambda: timeline.count("delete", "end") >= 1, WAIT_S)
        trainer._save_checkpoint()
        sweeper.join(WAIT_S)
        trainer.on_train_end()
    assert not sweeper.is_alive() and timeline.count("save", "end") == 1
    assert timeline.overlaps() == [], timeline.events
    left: Sequence[str] = sorted(set(orphans) & keys(tq, tq_partition))
    assert left, "the save came after the sweep had deleted every orphan: the test saw no overlap to stop"
