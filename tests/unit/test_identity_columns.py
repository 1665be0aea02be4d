"""A delete batch's expected identities held as columns (audit.IdentityColumns), not a tuple per row: the
same mapping as {key: Identity}, and the same answers from everything that reads one (the audit intent's
columns, the TQ store's re-check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tq_gc.audit import IdentityColumns, identity_columns
from tq_gc.first_seen import FirstSeen, FirstSeenRecords, audit_intent, first_seen_identities
from tq_gc.rows import Identity, tags_digest
from tq_gc.stores.transferqueue.rows import unchanged

KEYS = st.text(alphabet="abcdef/_0123", min_size=1, max_size=6)
TAGS = st.none() | st.dictionaries(
    st.sampled_from(["rollout_id", "call"]), st.sampled_from(["x", "y"]), max_size=2
)
INDEXES = st.none() | st.integers(min_value=0, max_value=5)
RECORDS = st.dictionaries(KEYS, st.tuples(st.integers(0, 10), TAGS, INDEXES), min_size=1, max_size=12)


def first_seen_of(records: dict[str, tuple[int, Any, int | None]]) -> FirstSeenRecords:
    first_seen = FirstSeenRecords()
    first_seen.update(
        {
            key: FirstSeen(at_ms, Identity(tags_digest(tags), index))
            for key, (at_ms, tags, index) in records.items()
        }
    )
    return first_seen


@given(records=RECORDS, data=st.data())
def test_the_identities_of_first_seen_records_are_columns_equal_to_a_dict_of_identities(
    records: dict[str, tuple[int, Any, int | None]], data: st.DataObject
) -> None:
    first_seen = first_seen_of(records)
    keys = data.draw(st.lists(st.sampled_from(sorted(records)), unique=True))
    identities = first_seen_identities(first_seen, keys)
    assert isinstance(identities, IdentityColumns)
    as_dict = {key: first_seen[key].identity for key in keys}
    assert identities == as_dict and list(identities) == keys
    assert identity_columns(identities, keys) == identity_columns(as_dict, keys)
    assert identity_columns(identities, keys[::-1]) == identity_columns(as_dict, keys[::-1])


@given(records=RECORDS, data=st.data())
def test_the_audit_intent_of_first_seen_records_is_the_intent_of_a_dict_of_records(
    records: dict[str, tuple[int, Any, int | None]], data: st.DataObject
) -> None:
    """One call builds a delete batch's audit intent from its first-seen records: the same batch whether
    they are held as columns or as a record a row, each row's identity and unreferenced age its own."""
    held = first_seen_of(records)
    keys = data.draw(st.lists(st.sampled_from(sorted(records)), unique=True))
    as_dict = dict(held.items())
    intent = audit_intent("run-1", "staging", held, keys, now_ms=20)
    assert intent == audit_intent("run-1", "staging", as_dict, keys, now_ms=20)
    assert (intent.run_id, intent.partition, intent.keys) == ("run-1", "staging", tuple(keys))
    assert not intent.confirmed
    assert intent.unreferenced_ms == tuple(20 - records[key][0] for key in keys)
    assert list(intent.tags_digests) == [tags_digest(records[key][1]) for key in keys]
    assert list(intent.global_indexes) == [records[key][2] for key in keys]


@dataclass
class Snapshot:
    """The two columns of TQ's BatchMeta that unchanged() reads (a pure function's input)."""

    global_indexes: list[int]
    custom_meta: list[Any]


@given(records=RECORDS, data=st.data())
def test_the_recheck_answers_the_same_for_columns_as_for_a_dict(
    records: dict[str, tuple[int, Any, int | None]], data: st.DataObject
) -> None:
    """Every row of the snapshot (its index and tags now, drawn to match or not) is judged the same
    whichever form the expected identities take."""
    first_seen = first_seen_of(records)
    keys = data.draw(st.lists(st.sampled_from(sorted(records)), unique=True, min_size=1))
    now = [
        (records[key][2] if same else data.draw(st.integers(0, 5)), records[key][1] if same else tags)
        for key in keys
        for same, tags in [(data.draw(st.booleans()), data.draw(TAGS))]
    ]
    snapshot = Snapshot([index if index is not None else 0 for index, _ in now], [tags for _, tags in now])
    as_dict = {key: first_seen[key].identity for key in keys}
    matched = unchanged(keys, snapshot, first_seen_identities(first_seen, keys))
    assert matched == unchanged(keys, snapshot, as_dict)
    for i, key in enumerate(keys):
        want = as_dict[key]
        same = want.matches(Identity(tags_digest(snapshot.custom_meta[i]), snapshot.global_indexes[i]))
        assert (i in matched) == same, (key, want, snapshot)


def test_columns_are_a_read_only_mapping_of_identities() -> None:
    columns = IdentityColumns({"a": "d1", "b": "d2"}, {"a": 3, "b": None})
    assert columns["a"] == Identity("d1", 3) and columns["b"] == Identity("d2", None)
    assert len(columns) == 2 and "a" in columns and "c" not in columns
    assert dict(columns.items()) == {"a": Identity("d1", 3), "b": Identity("d2", None)}
