"""First-seen records: when a sweep first saw a row unreferenced, and the row's identity then.

A partition's records are held column-wise (FirstSeenRecords): {key: FirstSeen} without a tuple per row.

A sweep of a million-row partition loads half a million records. As NamedTuples (two per row) they cost
three times more to build than to read, most of it the cyclic garbage collector walking the young
tuples again and again; as three dicts of strings and ints, which the collector does not track, they
build at C speed and the planner compares times without touching a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, KeysView, Mapping, Sequence
from typing import NamedTuple

from tq_gc.audit import AuditBatch, IdentityColumns
from tq_gc.rows import Identity


class FirstSeen(NamedTuple):
    """When the collector first saw a row unreferenced (store clock, ms), and the row's identity then."""

    at_ms: int
    identity: Identity


class FirstSeenRecords(Mapping[str, FirstSeen]):
    """{key: FirstSeen}, stored as {key: at_ms}, {key: tags digest} and {key: global index or None}."""

    __slots__ = ("at_ms", "digests", "indexes")

    def __init__(self) -> None:
        self.at_ms: dict[str, int] = {}
        self.digests: dict[str, str] = {}
        self.indexes: dict[str, int | None] = {}

    def __getitem__(self, key: str) -> FirstSeen:
        return FirstSeen(self.at_ms[key], Identity(self.digests[key], self.indexes[key]))

    def __contains__(self, key: object) -> bool:
        return key in self.at_ms

    def __iter__(self) -> Iterator[str]:
        return iter(self.at_ms)

    def __len__(self) -> int:
        return len(self.at_ms)

    def __repr__(self) -> str:
        shown = dict(self) if len(self) <= 10 else f"{len(self)} records"
        return f"FirstSeenRecords({shown!r})"

    def keys(self) -> KeysView[str]:
        return self.at_ms.keys()  # a dict view: set operations at C speed

    def copy(self) -> FirstSeenRecords:
        twin = FirstSeenRecords()
        twin.at_ms, twin.digests, twin.indexes = dict(self.at_ms), dict(self.digests), dict(self.indexes)
        return twin

    def add(
        self, at_ms: int, keys: Sequence[str], digests: Sequence[str], indexes: Sequence[int | None]
    ) -> None:
        """Rows first seen together, as columns: each key replaces any record it had. ValueError or
        TypeError, changing nothing, if the columns do not line up or a key is not hashable."""
        if not len(keys) == len(digests) == len(indexes):
            raise ValueError(f"columns of {len(keys)} keys, {len(digests)} digests, {len(indexes)} indexes")
        times = dict.fromkeys(keys, at_ms)
        self.at_ms.update(times)
        self.digests.update(zip(keys, digests, strict=True))
        self.indexes.update(zip(keys, indexes, strict=True))

    def update(self, records: Mapping[str, FirstSeen]) -> None:
        for key, (at_ms, (digest, index)) in records.items():
            self.at_ms[key], self.digests[key], self.indexes[key] = at_ms, digest, index

    def discard(self, keys: Iterable[str]) -> None:
        for key in keys:
            if self.at_ms.pop(key, None) is not None:
                del self.digests[key], self.indexes[key]


def first_seen_ms(records: Mapping[str, FirstSeen]) -> Mapping[str, int]:
    """{key: first seen at (ms)} of any records, without building a record per row for FirstSeenRecords."""
    if isinstance(records, FirstSeenRecords):
        return records.at_ms
    return {key: record.at_ms for key, record in records.items()}


def audit_intent(
    run_id: str, partition: str, records: Mapping[str, FirstSeen], keys: Sequence[str], now_ms: int
) -> AuditBatch:
    """The audit intent of deleting the rows of `keys` at `now_ms`: each row's identity and how long it
    has been unreferenced, from its first-seen record (read column by column from FirstSeenRecords)."""
    if isinstance(records, FirstSeenRecords):
        at_ms = list(map(records.at_ms.__getitem__, keys))
        digests = list(map(records.digests.__getitem__, keys))
        indexes = list(map(records.indexes.__getitem__, keys))
    else:
        chosen = [records[key] for key in keys]
        at_ms = [record.at_ms for record in chosen]
        digests = [record.identity.tags_digest for record in chosen]
        indexes = [record.identity.global_index for record in chosen]
    return AuditBatch(
        run_id=run_id,
        partition=partition,
        keys=tuple(keys),
        unreferenced_ms=tuple(now_ms - at for at in at_ms),
        global_indexes=tuple(indexes),
        tags_digests=tuple(digests),
    )


def first_seen_identities(records: Mapping[str, FirstSeen], keys: Iterable[str]) -> Mapping[str, Identity]:
    if isinstance(records, FirstSeenRecords):
        keys = list(keys)
        digests, indexes = records.digests, records.indexes
        return IdentityColumns({key: digests[key] for key in keys}, {key: indexes[key] for key in keys})
    return {key: records[key].identity for key in keys}
