"""Storage-side leftovers on a real TransferQueue: a storage clear that fails (0.1.11 logs and drops it;
the controller forgets the rows) leaves cells no partition owns. The audit finds every one, with its
bytes and unit, reclaims none and says why, and counts no cell of a live row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tq_gc.config import TransferQueueConfig
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.leftovers import storage_units

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
