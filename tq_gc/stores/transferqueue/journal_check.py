"""The change journal's check mode, for tests and the soak only (never set by the CLI or the sidecar):
each journalled listing of a partition that re-read only what changed (journalled_keys.py) is followed
at once by a full listing, and the two must agree.

The job goes on between the two reads, so they agree on every row at a global index that the journal
says no call touched after the journalled listing's seq (read before its re-reads). A row changed
after that seq may be in or out of the journalled listing, as in the equivalence machine's listing raced
by the job's clears and puts (tests/integration/test_change_journal_equivalence.py): the next listing
sees it. A mutation the journal never recorded is excused by nothing, so it shows as a difference.

The comparison is pure; JournalCheck counts and hands each comparison to its `record` (the soak appends
them to a file).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

# ({key: global index}, {key: bytes}): a swept partition's listing and the sizes it read
KeysAndSizes = tuple[Mapping[str, int], Mapping[str, int]]
# (key, bytes or None where no size was read)
Row = tuple[str, "int | None"]

DIFFERENCES_RECORDED = 20  # per comparison: the first ones, by index


@dataclass(frozen=True)
class RowDifference:
    """What each listing had at one global index (None: no row there)."""

    index: int
    journalled: Row | None
    full: Row | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "journalled": None if self.journalled is None else list(self.journalled),
            "full": None if self.full is None else list(self.full),
        }


def listing_differences(
    journalled: KeysAndSizes, full: KeysAndSizes, excused: Collection[int]
) -> list[RowDifference]:
    """Every global index outside `excused` where the two listings have another row (key or bytes),
    ascending."""
    by_journal, by_full = _rows_by_index(journalled), _rows_by_index(full)
    differing = (
        index
        for index in set(by_journal) | set(by_full)
        if index not in excused and by_journal.get(index) != by_full.get(index)
    )
    return [RowDifference(i, by_journal.get(i), by_full.get(i)) for i in sorted(differing)]


def _rows_by_index(listing: KeysAndSizes) -> dict[int, Row]:
    keys, sizes = listing
    return {index: (key, sizes.get(key)) for key, index in keys.items()}


class JournalCheck:
    """Counts the comparisons (and their differences), the journalled listings that could not be compared
    (the journal untrusted by the time the full listing ended) and the full listings the journal fell back
    to; hands each to `record`, a dict apiece."""

    def __init__(self, record: Callable[[dict[str, Any]], None] = lambda _: None) -> None:
        self._record = record
        self.compared = 0
        self.differed = 0
        self.not_compared = 0
        self.full_listings = 0

    def compare(
        self, partition: str, journalled: KeysAndSizes, full: KeysAndSizes, excused: Collection[int]
    ) -> list[RowDifference]:
        differences = listing_differences(journalled, full, excused)
        self.compared += 1
        self.differed += bool(differences)
        self._record(
            {
                "event": "compared",
                "partition": partition,
                "rows": len(journalled[0]),
                "full_rows": len(full[0]),
                "excused": len(excused),
                "differed": len(differences),
                "differences": [d.to_dict() for d in differences[:DIFFERENCES_RECORDED]],
            }
        )
        return differences

    def not_comparable(self, partition: str, why: str) -> None:
        self.not_compared += 1
        self._record({"event": "not compared", "partition": partition, "why": why})

    def listed_in_full(self, partition: str, why: str) -> None:
        self.full_listings += 1
        self._record({"event": "full", "partition": partition, "why": why})
