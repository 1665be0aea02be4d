"""Storage-side leftovers on a real TransferQueue: a storage clear that fails (0.1.11 logs and drops it;
the controller forgets the rows) leaves cells no partition owns. The audit finds every one, with its
bytes and unit, reclaims none and says why, and counts no cell of a live row."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tq_gc.config import TransferQueueConfig
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.leftovers import storage_units

from support.ray_fixtures import fresh_partition, reusable_indexes

pytestmark = pytest.mark.ray


@pytest.fixture
def store(ray_cluster: Any, tq: Any) -> Iterator[TransferQueueRowStore]:
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as attached:
        yield attached


def drop_cells(indexes: set[int]) -> None:
    """Teardown: clear the leftover cells in the units themselves, so later tests count what they put."""
    import ray

    def clear(actor: Any, wanted: list[int]) -> None:
        held = [index for index in wanted if index in actor.storage_data._active_keys]
        if held:
            actor.storage_data.clear(held)

    for unit in storage_units().values():
        ray.get(unit.__ray_call__.remote(clear, sorted(indexes)), timeout=60)


def test_the_audit_finds_every_cell_a_dropped_storage_clear_left_and_no_live_one(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, [f"live-{i}" for i in range(7)])
    put_rows(tq_partition, [f"doomed-{i}" for i in range(12)])
    indexes = store.list_keys(tq_partition)
    doomed = {indexes[f"doomed-{i}"] for i in range(12)}
    live = {indexes[f"live-{i}"] for i in range(7)}
    assert store.storage_leftovers().cells == 0

    with failing_storage_clears_of(tq):
        tq.kv_clear([f"doomed-{i}" for i in range(12)], tq_partition)
    try:
        assert set(store.list_keys(tq_partition)) == {f"live-{i}" for i in range(7)}  # the controller forgot

        found = store.storage_leftovers()

        assert set(found.indexes) == doomed  # every leftover cell, and no live row's
        assert not set(found.indexes) & live
        assert found.cells == 12 and sum(found.by_unit.values()) == 12 and len(found.by_unit) == 2
        assert found.bytes == 12 * 4 * 4  # put_rows writes one float32 tensor of 4 a row
        assert found.reclaimed == 0 and found.why_not_reclaimed and "reused" in found.why_not_reclaimed
        tq.kv_batch_get([f"live-{i}" for i in range(7)], tq_partition)  # the live rows are whole
    finally:
        drop_cells(doomed)
    assert store.storage_leftovers().cells == 0


def failing_storage_clears_of(tq: Any) -> Any:
    import contextlib

    @contextlib.contextmanager
    def failing() -> Iterator[None]:
        manager = tq.get_client().storage_manager
        original = manager._clear_single_storage_unit

        async def fail(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("injected: the storage unit did not clear")

        manager._clear_single_storage_unit = fail
        try:
            yield
        finally:
            manager._clear_single_storage_unit = original

    return failing()


class Churn:
    """A writer that puts batches of rows and clears each one `window` batches later (TQ reissues the
    freed indexes, so the same cells are reused over and over), reading every batch back before it clears
    it. `live` holds the keys put and not yet being cleared, with their expected values."""

    BATCH = 100
    WINDOW = 3

    def __init__(self, tq: Any, partition: str) -> None:
        self.tq, self.partition = tq, partition
        self.lock = threading.Lock()
        self.live: set[str] = set()
        self.clearing: set[str] = set()
        self.cycles = 0  # rows put, read back and cleared
        self.batches: list[list[str]] = []

    def put(self, keys: list[str], first_value: int) -> None:
        import torch
        from tensordict import TensorDict

        values = torch.arange(first_value, first_value + len(keys), dtype=torch.float32)
        fields = TensorDict({"x": values.unsqueeze(1).repeat(1, 4)}, batch_size=len(keys))
        self.tq.kv_batch_put(keys=keys, partition_id=self.partition, fields=fields, tags=[{} for _ in keys])
        with self.lock:
            self.live.update(keys)

    def assert_whole(self, keys: list[str], first_value: int) -> None:
        got = self.tq.kv_batch_get(keys, self.partition)["x"]  # a jagged tensor: one row a key
        rows = [row.tolist() for row in got.unbind()]
        expected = [[float(first_value + i)] * 4 for i in range(len(keys))]
        assert rows == expected, f"rows {keys[0]}.. lost their data"

    def step(self, batch: int) -> None:
        keys = [f"churn-{batch}-{i}" for i in range(self.BATCH)]
        self.put(keys, batch * self.BATCH)
        self.batches.append(keys)
        if len(self.batches) > self.WINDOW:
            old = self.batches.pop(0)
            old_batch = batch - self.WINDOW
            self.assert_whole(old, old_batch * self.BATCH)
            with self.lock:
                self.live.difference_update(old)
                self.clearing.update(old)
            self.tq.kv_clear(old, self.partition)
            self.cycles += len(old)


def test_over_ten_thousand_reuse_cycles_the_audit_reports_no_live_cell_and_changes_none(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """The audit only reads: while a writer reuses the same indexes 10,000 times, repeated audits never
    report the cell of a row that was live for the whole audit, and every row reads back whole. Then a
    dropped storage clear's cells are found, all of them."""
    # Cells earlier tests of the session left (a put into a capped unit, a process killed mid-put):
    # the churn may reuse their indexes (which ends them), never add to them.
    earlier = set(store.storage_leftovers().indexes)
    # Tag-only fillers take every index earlier tests freed (TQ reissues them first in, first out), so
    # the churn's own freed indexes come back within a few batches.
    with fresh_partition(tq, "tqgc-filler") as filler:
        put_rows(filler, [f"filler-{i}" for i in range(reusable_indexes(tq))], data=False)
        churn_and_audit(store, tq, tq_partition, earlier, put_rows)


def churn_and_audit(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, earlier: set[int], put_rows: Any
) -> None:
    churn = Churn(tq, tq_partition)
    steady = [f"steady-{i}" for i in range(50)]
    churn.put(steady, 10**6)
    audits: list[int] = []
    wrong: list[str] = []
    key_at: dict[int, str] = {}  # every index the audits' listings saw, with the last key there
    reused = threading.Event()  # an audit saw an index under another key than an earlier audit did
    failed: list[BaseException] = []
    done = threading.Event()

    def audit_repeatedly() -> None:
        try:
            while not done.is_set():
                with churn.lock:
                    before = set(churn.live)
                indexes = store.list_keys(tq_partition)
                for key, index in indexes.items():
                    if key_at.setdefault(index, key) != key:
                        reused.set()
                    key_at[index] = key
                found = set(store.storage_leftovers().indexes)
                with churn.lock:
                    live_throughout = before - churn.clearing
                missing = live_throughout - set(indexes)
                if missing:
                    wrong.append(f"live rows not listed: {sorted(missing)[:5]}")
                touched = {key for key in live_throughout if indexes.get(key) in found}
                if touched:
                    wrong.append(f"live rows reported as leftovers: {sorted(touched)[:5]}")
                audits.append(len(found))
        except BaseException as exc:
            failed.append(exc)

    auditor = threading.Thread(target=audit_repeatedly, daemon=True)
    auditor.start()
    deadline = time.monotonic() + 900
    batch = 0
    try:
        # Until 10,000 cycles and 3 audits are done, and the audits have seen an index reused.
        while (churn.cycles < 10_000 or len(audits) < 3 or not reused.is_set()) and not failed:
            assert time.monotonic() < deadline, f"{churn.cycles} cycles, {len(audits)} audits by the deadline"
            churn.step(batch)
            batch += 1
    finally:
        done.set()
        auditor.join(timeout=300)
    assert not auditor.is_alive() and not failed, failed
    assert wrong == [] and len(audits) >= 3
    assert reused.is_set()  # the audits saw indexes reused by other keys
    churn.assert_whole(steady, 10**6)
    remaining = set(store.storage_leftovers().indexes)
    assert remaining <= earlier  # the churn left none of its own

    doomed = [f"doomed-{i}" for i in range(30)]
    put_rows(tq_partition, doomed)
    doomed_indexes = {store.list_keys(tq_partition)[key] for key in doomed}
    with failing_storage_clears_of(tq):
        tq.kv_clear(doomed, tq_partition)
    try:
        found = store.storage_leftovers()
        assert set(found.indexes) - remaining == doomed_indexes  # every cell the dropped clear left
        assert set(found.indexes) <= doomed_indexes | remaining
        churn.assert_whole(steady, 10**6)
    finally:
        drop_cells(doomed_indexes)
