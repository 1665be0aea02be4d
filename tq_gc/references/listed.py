"""What the row-derived sources (tag and owner references) read: the sweep's listing where it has the
partition, else the row store; and the partitions the store has. A store failure fails the source: read
incompletely, it would release rows it protects."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from tq_gc.errors import ReferenceSourceError
from tq_gc.referenced import Source
from tq_gc.rows import Listing, Tags
from tq_gc.stores.base import RowStore

T = TypeVar("T")


class ListedRows:
    """One source's view of the rows: `listed` (the sweep's listing) first, the row store otherwise."""

    def __init__(self, source: Source, row_store: RowStore) -> None:
        self._source = source
        self._row_store = row_store

    def existing(self, existing: Collection[str] | None) -> set[str]:
        """The partitions the store has: `existing` when the caller knows them, else asked."""
        if existing is not None:
            return set(existing)
        return set(self._store_call("listing partitions", self._row_store.partitions))

    def rows(self, partition: str, listed: Listing | None) -> Mapping[str, Tags]:
        if listed is not None and partition in listed:
            return listed[partition]
        return self._store_call(
            f"listing partition {partition!r}", lambda: self._row_store.list_rows(partition)
        )

    def _store_call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as exc:  # any store failure: the source is incomplete, so the sweep aborts
            raise ReferenceSourceError(self._source.value, f"{what} failed: {exc!r}") from exc
