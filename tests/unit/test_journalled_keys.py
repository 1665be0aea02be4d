"""The kept listing of the change journal's listing (journalled_keys.KeptKeys): the touched indexes
forgotten, then read again, give the listing the partition has now. And the journal's look at the
threads' stacks for a mutating call from before its wrappers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tq_gc.stores.transferqueue.journalled_keys import JournalSettings, KeptKeys

# {global index: (key, bytes)}: a partition's keyed rows; bytes -1 where the controller has no size.
Rows = dict[int, tuple[str, int]]

rows_strategy = st.dictionaries(
    st.integers(0, 30),
    st.tuples(st.sampled_from([f"k{i}" for i in range(12)]), st.sampled_from([-1, 16, 32])),
    max_size=12,
).map(lambda rows: {index: row for index, row in rows.items() if _first_index(rows, row[0]) == index})


def _first_index(rows: Rows, key: str) -> int:
    return min(index for index, (other, _) in rows.items() if other == key)


def kept_of(rows: Rows) -> KeptKeys:
    keys = {key: index for index, (key, _) in rows.items()}
    sizes = {key: size for key, size in (row for row in rows.values()) if size >= 0}
    return KeptKeys(keys, sizes, "epoch", 0, 0.0)


@given(before=rows_strategy, after=rows_strategy)
def test_rereading_every_changed_index_gives_the_partition_as_it_is_now(before: Rows, after: Rows) -> None:
    changed = sorted(index for index in set(before) | set(after) if before.get(index) != after.get(index))
    kept = kept_of(before)
    kept.forget(changed)
    kept.add(
        changed,
        [after[i][0] if i in after else None for i in changed],
        [after.get(i, ("", -1))[1] for i in changed],
    )
    now = kept_of(after)
    assert (kept.keys, kept.sizes, kept.by_index) == (now.keys, now.sizes, now.by_index)


def test_a_window_read_without_sizes_leaves_its_rows_unsized() -> None:
    kept = kept_of({1: ("a", 16), 2: ("b", 16)})
    kept.forget([2])
    kept.add([2], ["c"], None)
    assert kept.keys == {"a": 1, "c": 2} and kept.sizes == {"a": 16}


def test_a_key_moved_to_another_index_leaves_nothing_at_the_old_one() -> None:
    kept = kept_of({1: ("a", 16)})
    kept.forget([5])  # the journal named only the new index
    kept.add([5], ["a"], [32])
    assert kept.keys == {"a": 5} and kept.by_index == {5: "a"} and kept.sizes == {"a": 32}


def test_the_journal_holds_at_least_one_index() -> None:
    with pytest.raises(ValueError, match="capacity_indexes"):
        JournalSettings(capacity_indexes=0)


def test_a_mutating_call_from_before_the_wrappers_keeps_the_journal_unsettled_until_it_returns() -> None:
    """The journal's look at every thread's stack (change_journal._unrecorded_calls): a thread inside a
    wrapped method's own code with no wrapper below it is a call the journal will not record."""
    import threading

    from tq_gc.stores.transferqueue.change_journal import _unrecorded_calls

    inside, leave = threading.Event(), threading.Event()

    def clear_meta() -> None:  # stands for the controller's own method, running unwrapped
        inside.set()
        leave.wait(30)

    def journalled() -> None:  # stands for the journal's wrapper around it
        clear_meta()

    unrecorded = _unrecorded_calls()
    state = {"original_codes": {clear_meta.__code__}, "wrapper_code": journalled.__code__}
    for target, expected in ((clear_meta, True), (journalled, False)):
        inside.clear()
        leave.clear()
        thread = threading.Thread(target=target)
        thread.start()
        try:
            assert inside.wait(30)
            assert unrecorded(state) is expected
        finally:
            leave.set()
            thread.join(30)
        assert unrecorded(state) is False
