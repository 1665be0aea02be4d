"""A row store that attaches on first use, and again after a failed attempt.

The sidecar may start before the job has created its TransferQueue (a driver that starts tq-gc, then the
training command): with `missing_queue_is_transient`, until TQ is there each sweep ends aborted with the
reason, and the schedule goes on. The CLI attaches late too, so that a sweep skipped for a held lease or
a fence costs no Ray connection (nor the seconds it takes to import TransferQueue); a missing TQ is its
user's mistake there (exit 2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tq_gc.errors import StoreUnavailable, TransferQueueNotFound
from tq_gc.rows import Identity, Tags
from tq_gc.stores.base import RowStore, keys_with_indexes, optional_method


class DeferredRowStore:
    def __init__(self, attach: Callable[[], RowStore], missing_queue_is_transient: bool = True) -> None:
        self._attach = attach
        self._missing_queue_is_transient = missing_queue_is_transient
        self._store: RowStore | None = None
        self._lock = threading.Lock()
        self._interrupted = False

    def _attached(self) -> RowStore:
        with self._lock:
            if self._store is None:
                try:
                    self._store = self._attach()
                except TransferQueueNotFound as exc:
                    if not self._missing_queue_is_transient:
                        raise
                    raise StoreUnavailable(f"{exc} (has the job created its TransferQueue yet?)") from exc
                if self._interrupted:
                    _interrupt(self._store)
            return self._store

    def ensure_attached(self) -> None:
        """Attach now if not yet attached (the collector times this apart from its listing)."""
        self._attached()

    def partitions(self) -> list[str]:
        return self._attached().partitions()

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return self._attached().list_rows(partition)

    def list_keys(self, partition: str) -> dict[str, int]:
        store = self._attached()
        list_keys = optional_method(store, "list_keys")
        return list_keys(partition) if list_keys is not None else keys_with_indexes(store, partition)

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        return self._attached().identities(partition, keys)

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        return self._attached().delete_if_unchanged(partition, expected)

    def wait_for_quiet(self) -> object:
        """The attached store's wait for a quiet moment (TransferQueueRowStore.wait_for_quiet), if any."""
        return self._forward("wait_for_quiet")

    def rows_per_delete(self) -> int | None:
        """The attached store's rows_per_delete (TransferQueueRowStore.rows_per_delete), if any."""
        rows: int | None = self._forward("rows_per_delete")
        return rows

    def controller_fit(self) -> str | None:
        """The attached store's controller_fit (TransferQueueRowStore.controller_fit), if any."""
        fit: str | None = self._forward("controller_fit")
        return fit

    def _forward(self, name: str) -> Any:
        """The attached store's optional method `name`, called; None if it has none."""
        method = optional_method(self._attached(), name)
        return method() if method is not None else None

    def interrupt(self) -> None:
        """Interrupt the attached store's reads (see TransferQueueRowStore.interrupt), and those of a
        store attached later."""
        with self._lock:
            self._interrupted = True
            store = self._store
        if store is not None:
            _interrupt(store)

    def take_request_stats(self) -> dict[str, list[float]]:
        """The attached store's request durations since the last call ({operation: [seconds]}), then
        afresh; none before it attached or when it keeps none."""
        with self._lock:
            take = optional_method(self._store, "take_request_stats")
        stats: dict[str, list[float]] = take() if take is not None else {}
        return stats

    def close(self) -> None:
        """Close the store we attached, if any (its own close(): never the TQ itself)."""
        with self._lock:
            close = optional_method(self._store, "close")
            self._store = None
        if close is not None:
            close()


def _interrupt(store: RowStore) -> None:
    interrupt = optional_method(store, "interrupt")
    if interrupt is not None:
        interrupt()
