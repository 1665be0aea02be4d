"""An in-memory row store for tests and the planner's scenarios. Same contract as TransferQueue."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tq_gc.rows import Identity, Tags, tags_digest
from tq_gc.stores.base import DELETE_BATCH_ROWS, RowStore, batches_of


@dataclass(slots=True)
class _Row:
    global_index: int
    tags: dict[str, Any]
    nbytes: int | None = None


class MemoryRowStore(RowStore):
    """Rows in a dict, with TQ's rules (a new write, a new global index). Subclass it to slip a writer
    into a sweep (override a method, call the base's)."""

    def __init__(self, delete_batch_rows: int = DELETE_BATCH_ROWS) -> None:
        """`delete_batch_rows`: the most rows of each of delete_batches' batches."""
        if delete_batch_rows < 1:
            raise ValueError(f"delete_batch_rows must be 1 or more, got {delete_batch_rows}")
        self._delete_batch_rows = delete_batch_rows
        self._partitions: dict[str, dict[str, _Row]] = {}
        self._next_index = itertools.count()
        self._lock = threading.Lock()

    def put(self, partition: str, key: str, tags: Tags | None = None, nbytes: int | None = None) -> int:
        """Write (or overwrite) a row (of `nbytes`, if given: row_sizes); like TQ, a new write gets a new
        global index."""
        with self._lock:
            index = next(self._next_index)
            self._partitions.setdefault(partition, {})[key] = _Row(index, dict(tags or {}), nbytes)
            return index

    def row_sizes(self, partition: str) -> dict[str, int]:
        """{key: bytes} of the rows put with a size."""
        with self._lock:
            rows = self._partitions.get(partition, {})
            return {key: row.nbytes for key, row in rows.items() if row.nbytes is not None}

    def partitions(self) -> list[str]:
        with self._lock:
            return list(self._partitions)

    def list_rows(self, partition: str) -> dict[str, Tags]:
        with self._lock:
            return {key: dict(row.tags) for key, row in self._partitions.get(partition, {}).items()}

    def list_keys(self, partition: str) -> dict[str, int]:
        """The keys list_rows lists, with their global indexes: a subclass that slips a writer into
        list_rows (a test's way in) is in every listing."""
        listed = self.list_rows(partition)
        with self._lock:
            rows = self._partitions.get(partition, {})
            return {key: rows[key].global_index for key in listed if key in rows}

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        with self._lock:
            rows = self._partitions.get(partition, {})
            return {
                key: Identity(tags_digest(rows[key].tags), rows[key].global_index)
                for key in keys
                if key in rows
            }

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        with self._lock:
            rows = self._partitions.get(partition, {})
            doomed = {
                key
                for key, identity in expected.items()
                if key in rows
                and identity.matches(Identity(tags_digest(rows[key].tags), rows[key].global_index))
            }
            for key in doomed:
                del rows[key]
            return doomed

    def delete_batches(self, partition: str, keys: Sequence[str]) -> Iterator[list[str]]:
        """Batches of delete_batch_rows (the constructor's), at once."""
        return batches_of(keys, self._delete_batch_rows)

    def delete(self, partition: str, keys: Sequence[str]) -> None:
        """Delete unconditionally, as the job's own finalizer does (tests use it; the collector never)."""
        with self._lock:
            rows = self._partitions.get(partition, {})
            for key in keys:
                rows.pop(key, None)

    def keys(self, partition: str) -> set[str]:
        with self._lock:
            return set(self._partitions.get(partition, {}))
