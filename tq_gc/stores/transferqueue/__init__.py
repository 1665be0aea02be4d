"""The TransferQueue backend: a running training job's TQ as a row store.

Its face is `TransferQueueRowStore` (store.py, imported on first use: it brings Ray with it) and
STORE_SERIES, what it adds to the metrics. Every TQ internal the backend reads is in internals.py, with
the TQ versions it was read from: the file to check when TQ moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tq_gc.metrics import StoreSeries
from tq_gc.stores.transferqueue.controller_function import MISFITS_FOUND
from tq_gc.stores.transferqueue.internals import CONTROLLER_FUNCTIONS
from tq_gc.stores.transferqueue.requests import PACING_WAITS, TQ_REQUEST_OPS

STORE_SERIES = StoreSeries(TQ_REQUEST_OPS, CONTROLLER_FUNCTIONS, MISFITS_FOUND.counts, PACING_WAITS)

if TYPE_CHECKING:
    from tq_gc.stores.transferqueue.store import TransferQueueRowStore


def __getattr__(name: str) -> Any:
    if name == "TransferQueueRowStore":
        from tq_gc.stores.transferqueue.store import TransferQueueRowStore

        return TransferQueueRowStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONTROLLER_FUNCTIONS", "MISFITS_FOUND", "STORE_SERIES", "TQ_REQUEST_OPS", "TransferQueueRowStore"]
