"""Row stores: where rows live. `transferqueue` is the real one; `memory` serves tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tq_gc.stores.base import RowStore
from tq_gc.stores.memory import MemoryRowStore

if TYPE_CHECKING:
    from tq_gc.config import Config


def attach_transfer_queue(config: Config) -> RowStore:
    """Attach to the running job's TransferQueue (imported lazily: Ray and torch are slow to import)."""
    from tq_gc.stores.transferqueue import TransferQueueRowStore

    return TransferQueueRowStore.attach(config.transfer_queue)


__all__ = ["MemoryRowStore", "RowStore", "attach_transfer_queue"]
