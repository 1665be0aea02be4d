"""Pure helpers over TransferQueue's answers, for the TQ row store: the identity of each row of a
snapshot, the rows still as expected, batches of keys (paced or not), and the first pass of a listing."""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

from tq_gc.audit import identity_columns
from tq_gc.rows import Identity, tags_digest
from tq_gc.stores.transferqueue.pacing import Pacer


def identities_of(keys: list[str], meta: Any) -> dict[str, Identity]:
    """{key: identity} of a snapshot: row i of `meta` is keys[i]; its custom_meta is the row's tags."""
    if not keys:
        return {}
    return {
        key: Identity(tags_digest(tags), int(index))
        for key, index, tags in zip(keys, meta.global_indexes, meta.custom_meta, strict=True)
    }


def unchanged(keys: list[str], meta: Any, expected: Mapping[str, Identity]) -> list[int]:
    """Positions in the snapshot whose row is still the expected one (runs once per deleted row)."""
    digests, indexes = identity_columns(expected, keys)
    now = zip(digests, indexes, meta.global_indexes, meta.custom_meta, strict=True)
    return [
        i
        for i, (want_digest, want_index, index, tags) in enumerate(now)
        if (want_index is None or want_index == index) and want_digest == tags_digest(tags)
    ]


def paced_batches(items: list[str], pacer: Pacer) -> Iterator[list[str]]:
    """Batches of the pacer's current size, read afresh for each batch."""
    start = 0
    while start < len(items):
        batch = items[start : start + pacer.window]
        start += len(batch)
        yield batch


class ListedPass:
    """The (global index, key) pairs a listing's first pass read, added in ascending index order: an array
    of indexes and a list of the keys (which the listing holds anyway), 16 bytes a row rather than a
    dict's ~90 (a million-row listing keeps this the whole second pass)."""

    def __init__(self) -> None:
        self._indexes = array("q")
        self._keys: list[str] = []

    def add(self, index: int, key: str) -> None:
        self._indexes.append(index)
        self._keys.append(key)

    def not_in(self, owners: Mapping[int, str]) -> dict[int, str]:
        """The pairs of `owners` ({index: key}) not read by the first pass: new rows, or another key at an
        index the first pass read."""
        if not owners:
            return {}
        low = bisect.bisect_left(self._indexes, min(owners))
        high = bisect.bisect_right(self._indexes, max(owners))
        read = dict(zip(self._indexes[low:high], self._keys[low:high], strict=True))
        return {index: key for index, key in owners.items() if read.get(index) != key}
