"""What a sweep found referenced: each reference source's rows, by partition. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from tq_gc.rows import KeysByPartition, RowId, group_by_partition, rows_of


class Source(StrEnum):
    ADMISSIONS = "admissions"
    MANIFESTS = "manifests"
    TAGS = "tags"
    OWNERS = "owners"


@dataclass(frozen=True, slots=True)
class References:
    """Every reference the sweep read: each source read completely, some more than once (see
    sweep.observe.Observer.read for the order that keeps a moving reference in view).

    Each source's rows are kept as {partition: keys}: the planner and the per-batch re-check work one
    partition at a time, and the admissions arrive grouped that way, so no sweep regroups 100k rows."""

    admissions: KeysByPartition = field(default_factory=dict)
    manifests: KeysByPartition = field(default_factory=dict)
    tags: KeysByPartition = field(default_factory=dict)
    owners: KeysByPartition = field(default_factory=dict)

    @classmethod
    def from_rows(
        cls,
        admissions: Iterable[RowId] = (),
        manifests: Iterable[RowId] = (),
        tags: Iterable[RowId] = (),
        owners: Iterable[RowId] = (),
    ) -> References:
        return cls(
            group_by_partition(admissions),
            group_by_partition(manifests),
            group_by_partition(tags),
            group_by_partition(owners),
        )

    def held(self, source: Source, partition: str) -> frozenset[str]:
        """The keys `source` references in `partition`."""
        by_partition: KeysByPartition = getattr(self, source.value)
        return by_partition.get(partition, frozenset())

    def rows(self) -> set[RowId]:
        """Every referenced row, whatever its source."""
        return rows_of(self.admissions) | rows_of(self.manifests) | rows_of(self.tags) | rows_of(self.owners)
