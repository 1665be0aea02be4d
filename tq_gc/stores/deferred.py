"""A row store that attaches on first use, and again after a failed attempt.

The sidecar may start before the job has created its TransferQueue (a driver that starts tq-gc, then the
training command). Until TQ is there, each sweep ends aborted with the reason, and the schedule goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from tq_gc.errors import StoreUnavailable, TransferQueueNotFound
from tq_gc.model import Identity, Tags
from tq_gc.stores.base import RowStore


class DeferredRowStore:
    def __init__(self, attach: Callable[[], RowStore]) -> None:
        self._attach = attach
        self._store: RowStore | None = None
        self._lock = threading.Lock()

    def _attached(self) -> RowStore:
        with self._lock:
            if self._store is None:
                try:
                    self._store = self._attach()
                except TransferQueueNotFound as exc:
                    raise StoreUnavailable(f"{exc} (has the job created its TransferQueue yet?)") from exc
            return self._store

    def partitions(self) -> list[str]:
        return self._attached().partitions()

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return self._attached().list_rows(partition)

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        return self._attached().identities(partition, keys)

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        return self._attached().delete_if_unchanged(partition, expected)

    def close(self) -> None:
        """Close the store we attached, if any (its own close(): never the TQ itself)."""
        with self._lock:
            close = getattr(self._store, "close", None)
            self._store = None
        if callable(close):
            close()
