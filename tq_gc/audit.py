"""The audit's rows and a delete batch's identity columns. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from tq_gc.rows import Identity


class IdentityColumns(Mapping[str, Identity]):
    """{key: Identity} held as {key: tags digest} and {key: global index}: a delete batch's expected
    identities without a tuple per row (2,000 Identity tuples took 1.5-1.9 ms a batch to build, ~0.5 s
    of a 1M-row sweep; identity_columns() reads the columns as they are)."""

    __slots__ = ("digests", "indexes")

    def __init__(self, digests: dict[str, str], indexes: dict[str, int | None]) -> None:
        if digests.keys() != indexes.keys():
            raise ValueError("identity columns of different keys")
        self.digests = digests
        self.indexes = indexes

    def __getitem__(self, key: str) -> Identity:
        return Identity(self.digests[key], self.indexes[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.digests)

    def __len__(self) -> int:
        return len(self.digests)


def identity_columns(
    identities: Mapping[str, Identity], keys: Iterable[str]
) -> tuple[list[str], list[int | None]]:
    """([tags digest], [global index]) of `keys`, in their order, from any {key: Identity}."""
    if isinstance(identities, IdentityColumns):
        ordered = list(keys)
        digests, indexes = identities.digests, identities.indexes
        return list(map(digests.__getitem__, ordered)), list(map(indexes.__getitem__, ordered))
    chosen = [identities[key] for key in keys]
    return [identity.tags_digest for identity in chosen], [identity.global_index for identity in chosen]


class DeletedRow(NamedTuple):
    """One deleted row, as the audit log reads back (AuditBatch.rows)."""

    partition: str
    key: str
    unreferenced_seconds: float
    global_index: int | None = None
    tags_digest: str = ""
    run_id: str = ""
    # False: the delete was intended and may have happened, but its sweeper never confirmed it (it
    # crashed, lost its lease or its store failed between the intent and the confirmation).
    confirmed: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "key": self.key,
            "unreferenced_s": round(self.unreferenced_seconds, 3),
            "global_index": self.global_index,
            "tags_digest": self.tags_digest,
            "run_id": self.run_id,
            "confirmed": self.confirmed,
        }


@dataclass(frozen=True, slots=True)
class AuditBatch:
    """The rows one delete batch removes, column by column, all of one run and one partition.

    Written ahead: the batch is recorded as an intent before the clear (confirmed=False), then confirmed
    with the rows actually deleted. The audit log keeps one entry per batch, not per row: a sweep
    deleting 50k rows writes 25 entries."""

    run_id: str
    partition: str
    keys: tuple[str, ...]
    unreferenced_ms: tuple[int, ...]
    global_indexes: tuple[int | None, ...]
    tags_digests: tuple[str, ...]
    confirmed: bool = False

    def __post_init__(self) -> None:
        lengths = {len(self.unreferenced_ms), len(self.global_indexes), len(self.tags_digests)}
        if lengths != {len(self.keys)}:
            raise ValueError(f"audit batch columns differ in length: {len(self.keys)} keys, {lengths}")

    def __len__(self) -> int:
        return len(self.keys)

    def rows(self) -> list[DeletedRow]:
        """One DeletedRow per key, in the batch's order."""
        columns = zip(self.keys, self.unreferenced_ms, self.global_indexes, self.tags_digests, strict=True)
        return [
            DeletedRow(self.partition, key, ms / 1000, index, digest, self.run_id, self.confirmed)
            for key, ms, index, digest in columns
        ]

    def confirm(self, deleted: Iterable[str]) -> AuditBatch:
        """The batch as confirmed: only the rows of `deleted`, in batch order."""
        gone = set(deleted)
        if gone.issuperset(self.keys):  # the usual case: every row of the batch went
            return replace(self, confirmed=True)
        keep = [i for i, key in enumerate(self.keys) if key in gone]
        return AuditBatch(
            run_id=self.run_id,
            partition=self.partition,
            keys=tuple(self.keys[i] for i in keep),
            unreferenced_ms=tuple(self.unreferenced_ms[i] for i in keep),
            global_indexes=tuple(self.global_indexes[i] for i in keep),
            tags_digests=tuple(self.tags_digests[i] for i in keep),
            confirmed=True,
        )
