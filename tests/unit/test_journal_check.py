"""The change journal's check mode (journal_check.py): a journalled listing against the full listing taken
right after it agrees on every row at a global index the job left alone between the two reads; only
the indexes the journal says were touched since the journalled listing's seq are excused."""

from __future__ import annotations

from typing import Any

from tq_gc.stores.transferqueue.journal_check import JournalCheck, listing_differences
from tq_gc.stores.transferqueue.journalled_keys import JournalSettings

# ({key: global index}, {key: bytes})
Listing = tuple[dict[str, int], dict[str, int]]


def listing(rows: dict[int, tuple[str, int]]) -> Listing:
    """{global index: (key, bytes)}: a partition's listing; bytes -1 where it read no size."""
    keys = {key: index for index, (key, _) in rows.items()}
    sizes = {key: size for key, size in rows.values() if size >= 0}
    return keys, sizes


def test_equal_listings_do_not_differ() -> None:
    rows = listing({1: ("a", 16), 2: ("b", 16), 7: ("c", -1)})
    assert listing_differences(rows, rows, excused=set()) == []


def test_a_row_only_one_listing_has_differs_unless_its_index_was_touched() -> None:
    journalled = listing({1: ("a", 16), 2: ("b", 16)})
    full = listing({1: ("a", 16)})
    [difference] = listing_differences(journalled, full, excused=set())
    assert (difference.index, difference.journalled, difference.full) == (2, ("b", 16), None)
    assert listing_differences(journalled, full, excused={2}) == []


def test_another_key_or_another_size_at_an_index_differs() -> None:
    journalled = listing({1: ("a", 16), 2: ("b", 16)})
    full = listing({1: ("x", 16), 2: ("b", 32)})
    assert [d.index for d in listing_differences(journalled, full, excused=set())] == [1, 2]
    assert listing_differences(journalled, full, excused={1, 2}) == []


def test_a_size_read_by_one_listing_only_differs() -> None:
    journalled = listing({3: ("a", -1)})
    full = listing({3: ("a", 16)})
    [difference] = listing_differences(journalled, full, excused={4})
    assert difference.to_dict() == {"index": 3, "journalled": ["a", None], "full": ["a", 16]}


def test_a_key_at_another_index_differs_at_both_unless_both_were_touched() -> None:
    journalled = listing({1: ("a", 16)})
    full = listing({5: ("a", 16)})
    assert [d.index for d in listing_differences(journalled, full, excused={5})] == [1]
    assert listing_differences(journalled, full, excused={1, 5}) == []


def test_the_check_counts_what_it_compared_and_records_each_comparison() -> None:
    records: list[dict[str, Any]] = []
    check = JournalCheck(records.append)
    same = listing({1: ("a", 16)})
    check.compare("p", same, same, excused=set())
    check.compare("p", same, listing({}), excused=set())
    check.not_comparable("p", "the journal overflowed")
    check.listed_in_full("p", "no earlier read of this journal")
    assert (check.compared, check.differed, check.not_compared, check.full_listings) == (2, 1, 1, 1)
    assert [record["event"] for record in records] == ["compared", "compared", "not compared", "full"]
    assert records[0]["differences"] == [] and records[1]["differences"][0]["index"] == 1


def test_the_journal_checks_nothing_unless_a_test_or_the_soak_asks() -> None:
    assert JournalSettings().check is None
