"""Rows that reference rows: a tag of a row in one partition names keys of another.

The canonical case is `rollout_data` rows whose `route_assembly_plan.cleanup_staging_keys` name the
`rollout_staging` rows the trainer still needs. Tags may carry that plan as a JSON string rather than
a nested object, so strings along the key path are decoded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from tq_gc.config import TagReference
from tq_gc.errors import ReferenceSourceError
from tq_gc.model import KeysByPartition, RowId, Source, Tags, group_by_partition
from tq_gc.references.keypath import extract_keys
from tq_gc.stores.base import RowStore

Listing = Mapping[str, Mapping[str, Tags]]


class TagsSource:
    """Every row named by a configured tag reference in the rows of the row store."""

    name: str = Source.TAGS.value

    def __init__(self, references: Sequence[TagReference], row_store: RowStore) -> None:
        self._by_partition: dict[str, list[TagReference]] = defaultdict(list)
        for reference in references:
            self._by_partition[reference.partition].append(reference)
        self._row_store = row_store

    @property
    def partitions(self) -> list[str]:
        """The partitions this source lists: a collector that lists them anyway can pass its listing."""
        return list(self._by_partition)

    def read(self, listed: Listing | None = None) -> KeysByPartition:
        """`listed` ({partition: {key: tags}}) replaces listing a partition the caller listed this sweep."""
        rows: set[RowId] = set()
        for partition, references in self._by_partition.items():
            if listed is not None and partition in listed:
                tagged_rows = listed[partition]
            else:
                tagged_rows = self._list(partition)
            for reference in references:
                rows.update(_referenced_rows(reference, tagged_rows))
        return group_by_partition(rows)

    def _list(self, partition: str) -> Mapping[str, Tags]:
        try:
            return self._row_store.list_rows(partition)
        except Exception as exc:  # any store failure: the source is incomplete, so the sweep aborts
            raise ReferenceSourceError(
                Source.TAGS.value, f"listing partition {partition!r} failed: {exc!r}"
            ) from exc


def _referenced_rows(reference: TagReference, tagged_rows: Mapping[str, Tags]) -> list[RowId]:
    rows: list[RowId] = []
    for key, tags in tagged_rows.items():
        if tags is None:
            continue
        try:
            keys = extract_keys(tags, reference.key_path, decode_json_strings=True)
        except ValueError as exc:
            raise ReferenceSourceError(
                Source.TAGS.value,
                f"row {reference.partition}/{key}: tag path {reference.key_path!r}: {exc}",
            ) from None
        rows.extend(RowId(reference.target_partition, target) for target in keys)
    return rows
