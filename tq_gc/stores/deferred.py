"""A row store that attaches on first use, again after a failed attempt, and afresh when the store it was
attached to is gone or replaced.

The sidecar may start before the job has created its TransferQueue (a driver that starts tq-gc, then the
training command): with `missing_queue_is_transient`, until TQ is there each sweep ends aborted with the
reason, and the schedule goes on. The CLI attaches late too, so that a sweep skipped for a held lease or
a fence costs no Ray connection (nor the seconds it takes to import TransferQueue); a missing TQ is its
user's mistake there (exit 2).

A job may replace its TQ while tq-gc runs (its controller died, and the job created a new
one): `ensure_attached()`, at the start of each sweep, asks the attached store whether it still is
the live one. If not, it closes that store (our client only: the old TQ is gone, the new one is the
job's) and attaches to the new one; while there is none, the sweep ends aborted, having deleted nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from tq_gc.errors import RowStoreNotFound, StoreUnavailable
from tq_gc.footprint import Leftovers, StorageFill
from tq_gc.listings import HowListed
from tq_gc.rows import Identity, Tags
from tq_gc.stores.base import RowStore, as_row_store
from tq_gc.stores.claims import StoreClaim

logger = logging.getLogger(__name__)


class DeferredRowStore(RowStore):
    def __init__(self, attach: Callable[[], object], missing_queue_is_transient: bool = True) -> None:
        self._sized: frozenset[str] | None = None  # size_partitions' last word, for a store attached later
        self._attach = attach
        self._missing_queue_is_transient = missing_queue_is_transient
        self._store: RowStore | None = None
        self._lock = threading.Lock()
        self._interrupted = False

    def _attached(self) -> RowStore:
        with self._lock:
            if self._store is None:
                try:
                    self._store = as_row_store(self._attach())
                except RowStoreNotFound as exc:
                    if not self._missing_queue_is_transient:
                        raise
                    raise StoreUnavailable(f"{exc} ({exc.not_yet})") from exc
                if self._interrupted:
                    self._store.interrupt()
                if self._sized is not None:
                    self._store.size_partitions(self._sized)
            return self._store

    def ensure_attached(self) -> None:
        """Attach now if not yet attached (the collector times this apart from its listing). Attached to
        a store that is gone or replaced (its ensure_attached raises StoreUnavailable): close it, and
        attach afresh; StoreUnavailable while there is nothing to attach to."""
        with self._lock:
            store = self._store
        if store is not None:
            try:
                store.ensure_attached()
                return
            except StoreUnavailable as exc:
                logger.warning("the row store is gone or replaced (%s): attaching afresh", exc)
                self._drop(store)
        self._attached().ensure_attached()

    def _drop(self, store: RowStore) -> None:
        with self._lock:
            if self._store is store:
                self._store = None
        store.close()

    def identity_space(self) -> str | None:
        """The attached store's identity_space; None before it attached."""
        with self._lock:
            store = self._store
        return None if store is None else store.identity_space()

    def partitions(self) -> list[str]:
        return self._attached().partitions()

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return self._attached().list_rows(partition)

    def list_keys(self, partition: str) -> dict[str, int]:
        return self._attached().list_keys(partition)

    def row_sizes(self, partition: str) -> Mapping[str, int]:
        with self._lock:
            store = self._store
        return {} if store is None else store.row_sizes(partition)

    def size_partitions(self, partitions: Collection[str]) -> None:
        self._sized = frozenset(partitions)
        with self._lock:
            store = self._store
        if store is not None:
            store.size_partitions(self._sized)

    def storage_fill(self) -> StorageFill | None:
        return self._attached().storage_fill()

    def storage_leftovers(self) -> Leftovers | None:
        return self._attached().storage_leftovers()

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        return self._attached().identities(partition, keys)

    def delete_batches(self, partition: str, keys: Sequence[str]) -> Iterator[list[str]]:
        return self._attached().delete_batches(partition, keys)

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        return self._attached().delete_if_unchanged(partition, expected)

    def describe(self) -> dict[str, str]:
        return self._attached().describe()

    def claim(self, holder: str, where: str) -> StoreClaim | None:
        """The attached store's claim (attaching first): it ends when that store closes."""
        return self._attached().claim(holder, where)

    def interrupt(self) -> None:
        """Interrupt the attached store's reads, and those of a store attached later."""
        with self._lock:
            self._interrupted = True
            store = self._store
        if store is not None:
            store.interrupt()

    def take_request_stats(self) -> dict[str, list[float]]:
        """The attached store's request durations since the last call ({operation: [seconds]}), then
        afresh; none before it attached."""
        with self._lock:
            store = self._store
        return {} if store is None else store.take_request_stats()

    def take_pacing_stats(self) -> dict[str, float]:
        """The attached store's pacing waits since the last call, then afresh; none before it attached."""
        with self._lock:
            store = self._store
        return {} if store is None else store.take_pacing_stats()

    def take_listings(self) -> dict[str, HowListed]:
        """How the attached store listed each partition since the last call, then afresh; none before it
        attached."""
        with self._lock:
            store = self._store
        return {} if store is None else store.take_listings()

    def close(self) -> None:
        """Close the store we attached, if any (its own close(): never the TQ itself)."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()
