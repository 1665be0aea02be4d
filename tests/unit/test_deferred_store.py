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
