"""Rows that reference rows: a tag of a row in one partition names keys of another.

The canonical case is `rollout_data` rows whose `route_assembly_plan.cleanup_staging_keys` name the
`rollout_staging` rows the trainer still needs. Tags may carry that plan as a JSON string rather than
a nested object, so strings along the key path are decoded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

from tq_gc.config import TagReference
from tq_gc.errors import ReferenceSourceError
from tq_gc.formats.keypath import extract_keys
from tq_gc.referenced import Source
from tq_gc.references.listed import ListedRows
from tq_gc.rows import KeysByPartition, Listing, RowId, Tags, group_by_partition
from tq_gc.stores.base import RowStore

T = TypeVar("T")


class TagsSource:
    """Every row named by a configured tag reference in the rows of the row store.

    Fails closed: a tag partition the row store does not have (renamed, or a typo in the config) is an
    error, not a partition that references nothing, and so is a reference with `when_empty: abort`
    that names no row."""

    name: str = Source.TAGS.value

    def __init__(self, references: Sequence[TagReference], row_store: RowStore) -> None:
        self._by_partition: dict[str, list[TagReference]] = defaultdict(list)
        for reference in references:
            self._by_partition[reference.partition].append(reference)
        self._listed = ListedRows(Source.TAGS, row_store)
        self.counts: dict[str, int] = {}  # {reference's source_id: rows it named}, as of the last read

    @property
    def partitions(self) -> list[str]:
        """The partitions this source lists: a collector that lists them anyway can pass its listing."""
        return list(self._by_partition)

    def read(self, listed: Listing | None = None, existing: Collection[str] | None = None) -> KeysByPartition:
        """`listed` ({partition: {key: tags}}) replaces listing a partition the caller listed this sweep;
        `existing` (the row store's partitions) replaces asking the store which partitions exist."""
        self.counts = {}
        if not self._by_partition:
            return {}
        known = self._listed.existing(existing)
        rows: set[RowId] = set()
        for partition, references in self._by_partition.items():
            if partition not in known:
                raise ReferenceSourceError(
                    Source.TAGS.value,
                    f"partition {partition!r} (tag_references) does not exist in the row store: a typo, "
                    "a renamed partition, or a job that has not written it yet. Nothing is deleted until "
                    "it exists",
                )
            tagged_rows = self._listed.rows(partition, listed)
            for reference in references:
                named = _checked_rows(reference, tagged_rows)
                self.counts[reference.source_id] = len(named)
                rows.update(named)
        return group_by_partition(rows)


def _checked_rows(reference: TagReference, tagged_rows: Mapping[str, Tags]) -> list[RowId]:
    rows = _referenced_rows(reference, tagged_rows)
    if reference.expect_nonempty and not rows:
        raise ReferenceSourceError(
            Source.TAGS.value,
            f"tag path {reference.key_path!r} names no row in the {len(tagged_rows)} rows of partition "
            f"{reference.partition!r}, but the reference has when_empty: abort: check the key path",
        )
    return rows


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
