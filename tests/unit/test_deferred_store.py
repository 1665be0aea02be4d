"""The sidecar's row store attaches at its first sweep: the job may create its TransferQueue later."""

from __future__ import annotations

import pytest

from tq_gc.errors import StoreUnavailable, TransferQueueNotFound
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.memory import MemoryRowStore


def test_deferred_store_attaches_once_the_queue_exists() -> None:
    attempts: list[int] = []
    real = MemoryRowStore()
    real.put("p", "k")

    def attach() -> MemoryRowStore:
        attempts.append(1)
        if len(attempts) == 1:
            raise TransferQueueNotFound("auto")
        return real

    store = DeferredRowStore(attach)
    with pytest.raises(StoreUnavailable, match="has the job created its TransferQueue yet"):
        store.list_rows("p")
    assert store.list_rows("p") == {"k": {}}
    assert store.list_rows("p") == {"k": {}}
    assert len(attempts) == 2, "attached once it could, then kept"


def test_a_missing_queue_can_be_the_callers_mistake() -> None:
    def attach() -> MemoryRowStore:
        raise TransferQueueNotFound("auto")

    with pytest.raises(TransferQueueNotFound):
        DeferredRowStore(attach, missing_queue_is_transient=False).partitions()


def test_nothing_attached_nothing_closed() -> None:
    attempts: list[int] = []
    store = DeferredRowStore(lambda: attempts.append(1) or MemoryRowStore())  # type: ignore[func-returns-value]
    store.close()
    assert attempts == []
