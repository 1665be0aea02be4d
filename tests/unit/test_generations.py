"""The first-seen records' Redis layout (tq_gc/state/generations.py) against a plain dict, without Redis:
the hash is a dict, the tombstones a list, and every save applies its Rewrite the way the Lua script does.
The real Redis round trip is in tests/contract/test_state_store.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from tq_gc.first_seen import FirstSeen, FirstSeenRecords, first_seen_ms
from tq_gc.rows import Identity
from tq_gc.state import generations

CHUNK = 3  # small, so that generations span several fields


@dataclass
class FakeRedis:
    """What the Lua scripts do to the hash and the tombstone list, in Python."""

    hash: dict[str, str] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    saves: int = 0

    def load(self) -> generations.Layout:
        version = self.hash.get(generations.VERSION_FIELD, "")
        fields = {name: value for name, value in self.hash.items() if name != generations.VERSION_FIELD}
        return generations.decode("p", version, fields, list(self.gone))

    def save(self, layout: generations.Layout, upserts: dict[str, FirstSeen], drops: set[str]) -> None:
        assert self.hash.get(generations.VERSION_FIELD, "") == layout.version, "saved from a stale read"
        change = generations.rewrite(layout, upserts, drops, CHUNK)
        for name in change.delete_fields:
            self.hash.pop(name, None)
        self.hash.update(change.set_fields)
        self.saves += 1
        self.hash[generations.VERSION_FIELD] = str(self.saves)
        del self.gone[: layout.tombstones]

    def confirm(self, keys: list[str]) -> None:
        if keys:
            self.gone.append(json.dumps(keys))


KEYS = st.sampled_from([f"k{i}" for i in range(12)])
RECORDS = st.builds(
    FirstSeen,
    st.sampled_from([10, 20, 30]),  # few times: rows join existing generations
    st.builds(Identity, st.sampled_from(["d1", "d2"]), st.none() | st.integers(0, 5)),
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.dictionaries(KEYS, RECORDS, max_size=8), st.sets(KEYS, max_size=4)),
        st.tuples(st.just("confirm"), st.lists(KEYS, max_size=5, unique=True)),
    ),
    max_size=12,
)


@given(STEPS)
def test_saves_and_tombstones_read_back_as_a_plain_dict(steps: list[tuple]) -> None:
    redis, model = FakeRedis(), {}
    for step in steps:
        if step[0] == "save":
            _, upserts, drops = step
            redis.save(redis.load(), upserts, drops)
            model.update(upserts)
            for key in drops:
                model.pop(key, None)
        else:
            redis.confirm(step[1])
            for key in step[1]:
                model.pop(key, None)
        assert redis.load().records == model


@given(STEPS)
def test_every_key_lives_in_one_field_and_no_field_is_empty(steps: list[tuple]) -> None:
    redis = FakeRedis()
    for step in steps:
        if step[0] == "save":
            redis.save(redis.load(), step[1], step[2])
        else:
            redis.confirm(step[1])
    chunks = [json.loads(value)[0] for name, value in redis.hash.items() if name != generations.VERSION_FIELD]
    members = [key for chunk in chunks for key in chunk]
    assert len(members) == len(set(members))
    assert all(0 < len(chunk) <= CHUNK for chunk in chunks)


def test_a_generation_is_rewritten_only_when_it_loses_or_gains_rows() -> None:
    redis = FakeRedis()
    redis.save(redis.load(), {"a": seen(10), "b": seen(10)}, set())
    redis.save(redis.load(), {"c": seen(20)}, set())
    before = dict(redis.hash)

    change = generations.rewrite(redis.load(), {"d": seen(30)}, {"c"}, CHUNK)

    assert change.delete_fields == ["g:20:0"]
    assert set(change.set_fields) == {"g:30:0"}
    assert before["g:10:0"] == redis.hash["g:10:0"]


def test_an_unreadable_generation_is_forgotten_and_removed_by_the_next_save() -> None:
    redis = FakeRedis()
    redis.save(redis.load(), {"a": seen(10), "b": seen(20)}, set())
    redis.hash["g:20:0"] = "not json"
    redis.hash["junk"] = "[]"

    layout = redis.load()
    assert layout.records == {"a": seen(10)}
    redis.save(layout, {}, set())
    assert set(redis.hash) == {"g:10:0", generations.VERSION_FIELD}


def test_an_unreadable_tombstone_forgets_every_record() -> None:
    """It named rows deleted since they were recorded: keeping any record could give a row recreated
    under such a key the old row's time. Forgetting them all only restarts grace."""
    redis = FakeRedis()
    redis.save(redis.load(), {"a": seen(10), "b": seen(20)}, set())
    redis.gone.append("{broken")

    layout = redis.load()
    assert layout.records == {}
    redis.save(layout, {}, set())
    assert redis.hash == {generations.VERSION_FIELD: "2"} and redis.gone == []


def test_a_key_in_two_generations_keeps_the_later_time_and_is_written_once() -> None:
    redis = FakeRedis()
    redis.save(redis.load(), {"a": seen(10), "b": seen(10)}, set())
    redis.hash["g:20:0"] = json.dumps([["a"], ["d1"], [None]])  # a save cut short, by hand

    layout = redis.load()
    assert layout.records == {"a": seen(20), "b": seen(10)}
    redis.save(layout, {}, set())
    assert json.loads(redis.hash["g:10:0"])[0] == ["b"]
    assert redis.load().records == {"a": seen(20), "b": seen(10)}


def test_columns_that_do_not_line_up_change_nothing() -> None:
    records = FirstSeenRecords()
    records.update({"a": seen(1)})
    try:
        records.add(2, ["b", "c"], ["d1"], [None, None])
    except ValueError:
        pass
    else:
        raise AssertionError("columns of different lengths were accepted")
    assert records == {"a": seen(1)} and first_seen_ms(records) == {"a": 1}


def seen(at_ms: int, digest: str = "d1", index: int | None = None) -> FirstSeen:
    return FirstSeen(at_ms, Identity(digest, index))
