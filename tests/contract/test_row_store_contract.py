"""The RowStore contract (tq_gc/stores/base.py), one suite for every row store: the memory store the
unit tests and scenarios rely on must behave like the real TransferQueue store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tq_gc.config import TransferQueueConfig
from tq_gc.rows import Identity, tags_digest
from tq_gc.stores import MemoryRowStore, RowStore

Put = Callable[[str, Sequence[str], Sequence[Mapping[str, Any]]], None]


@dataclass
class Backend:
    store: RowStore
    partition: str  # fresh, empty
    put: Put  # put(partition, keys, tags per key): write (or overwrite) rows
    remove: Callable[[str, Sequence[str]], None]  # unconditional delete, as the job itself does

    def write(self, keys: Sequence[str], tags: Mapping[str, Any] | None = None) -> None:
        self.put(self.partition, keys, [dict(tags or {}) for _ in keys])


@pytest.fixture(params=["memory", pytest.param("transferqueue", marks=pytest.mark.ray)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        memory = MemoryRowStore(delete_batch_rows=3)  # small, as the TQ store's below

        def put_memory(partition: str, keys: Sequence[str], tags: Sequence[Mapping[str, Any]]) -> None:
            for key, row_tags in zip(keys, tags, strict=True):
                memory.put(partition, key, row_tags)

        yield Backend(memory, f"contract-{uuid.uuid4().hex[:8]}", put_memory, memory.delete)
        return

    from tq_gc.stores.transferqueue import TransferQueueRowStore
    from tq_gc.stores.transferqueue.pacing import FixedPacing

    cluster = request.getfixturevalue("ray_cluster")
    partition = request.getfixturevalue("tq_partition")
    put_rows = request.getfixturevalue("put_rows")
    # a small request batch, so that every method crosses batch boundaries here
    config = TransferQueueConfig(ray_address=cluster.address)
    with TransferQueueRowStore.attach(config, fixed=FixedPacing(batch=3)) as store:
        yield Backend(store, partition, lambda p, keys, tags: put_rows(p, keys, list(tags)), store.delete)


UNKNOWN_PARTITION = "contract-never-written"


def test_an_unknown_partition_is_empty_and_stays_unknown(backend: Backend) -> None:
    store = backend.store

    assert store.list_rows(UNKNOWN_PARTITION) == {}
    assert store.identities(UNKNOWN_PARTITION, ["a", "b"]) == {}
    assert store.delete_if_unchanged(UNKNOWN_PARTITION, {"a": Identity(tags_digest(None))}) == set()
    assert UNKNOWN_PARTITION not in store.partitions()


def test_list_rows_returns_every_key_with_its_tags(backend: Backend) -> None:
    backend.put(
        backend.partition, ["a", "b", "c", "d"], [{"rollout_id": "r1"}, {"rollout_id": "r2"}, {}, {"n": 3}]
    )

    assert backend.store.list_rows(backend.partition) == {
        "a": {"rollout_id": "r1"},
        "b": {"rollout_id": "r2"},
        "c": {},
        "d": {"n": 3},
    }
    assert backend.partition in backend.store.partitions()


def test_identities_cover_existing_keys_only_and_create_none(backend: Backend) -> None:
    keys = [f"k{i}" for i in range(8)]
    backend.put(backend.partition, keys, [{"i": i} for i in range(8)])
    before = backend.store.list_rows(backend.partition)

    asked = ["missing-0", *keys[:4], "missing-1", "missing-2", *keys[4:], "missing-3", keys[0]]
    found = backend.store.identities(backend.partition, asked)

    assert set(found) == set(keys)
    assert {key: identity.tags_digest for key, identity in found.items()} == {
        key: tags_digest({"i": i}) for i, key in enumerate(keys)
    }
    indexes = [identity.global_index for identity in found.values()]
    assert None not in indexes and len(set(indexes)) == len(keys)
    assert backend.store.list_rows(backend.partition) == before  # nothing created


def test_identities_are_stable_while_a_row_is_untouched(backend: Backend) -> None:
    backend.write(["a", "b"], {"rollout_id": "r1"})

    first = backend.store.identities(backend.partition, ["a", "b"])
    second = backend.store.identities(backend.partition, ["b", "a"])

    assert first == second


def test_rewriting_a_row_with_other_tags_changes_its_identity(backend: Backend) -> None:
    backend.write(["a", "b"], {"attempt": 1})
    before = backend.store.identities(backend.partition, ["a", "b"])

    backend.write(["a"], {"attempt": 2})
    after = backend.store.identities(backend.partition, ["a", "b"])

    assert not after["a"].matches(before["a"])
    assert after["b"] == before["b"]
    assert backend.store.list_rows(backend.partition)["a"] == {"attempt": 2}


def test_delete_if_unchanged_deletes_exactly_the_rows_still_as_expected(backend: Backend) -> None:
    keys = [f"k{i}" for i in range(10)]
    backend.write(keys, {"rollout_id": "r1"})
    expected = backend.store.identities(backend.partition, keys)
    backend.write(["k1"], {"rollout_id": "r2"})  # retagged since
    backend.remove(backend.partition, ["k2"])  # gone since
    expected["unknown"] = Identity(tags_digest({"rollout_id": "r1"}))
    expected["k3"] = Identity(expected["k3"].tags_digest)  # no index known: the digest decides
    expected["k4"] = Identity(tags_digest({"rollout_id": "other"}), expected["k4"].global_index)
    spared = {"k5", "k6"}
    asked = {key: identity for key, identity in expected.items() if key not in spared}

    deleted = backend.store.delete_if_unchanged(backend.partition, asked)

    assert deleted == {"k0", "k3", "k7", "k8", "k9"}
    assert set(backend.store.list_rows(backend.partition)) == {"k1", "k4", "k5", "k6"}
    assert backend.store.delete_if_unchanged(backend.partition, asked) == set()  # again: nothing left


def test_delete_removes_exactly_the_given_keys_and_is_idempotent(backend: Backend) -> None:
    keys = [f"k{i}" for i in range(10)]
    backend.write(keys, {"rollout_id": "r1"})
    doomed = keys[:7]

    backend.remove(backend.partition, doomed)
    assert set(backend.store.list_rows(backend.partition)) == set(keys[7:])

    backend.remove(backend.partition, [*doomed, "never-existed", keys[0]])
    assert set(backend.store.list_rows(backend.partition)) == set(keys[7:])
    assert set(backend.store.identities(backend.partition, keys)) == set(keys[7:])


def test_a_deleted_key_can_be_written_again(backend: Backend) -> None:
    backend.write(["a"], {"attempt": 1})
    backend.remove(backend.partition, ["a"])
    assert backend.store.identities(backend.partition, ["a"]) == {}

    backend.write(["a"], {"attempt": 2})

    assert backend.store.list_rows(backend.partition) == {"a": {"attempt": 2}}
    assert backend.store.identities(backend.partition, ["a"])["a"].tags_digest == tags_digest({"attempt": 2})


def test_delete_batches_cover_the_keys_in_the_plans_order_each_in_one_batch(backend: Backend) -> None:
    """However a store sizes and paces its delete batches, they are the plan's keys, each once, in the
    plan's order: the sweep re-checks and clears each batch as it comes (sweep/delete.py)."""
    keys = [f"k{i:02d}" for i in (7, 3, 11, 0, 5, 9, 1)]  # not sorted: the plan's order is kept
    backend.write(keys)

    batches = list(backend.store.delete_batches(backend.partition, keys))

    assert all(batches), batches
    assert [key for batch in batches for key in batch] == keys
    assert len(batches) > 1, "a batch smaller than the plan: the keys cross batch boundaries here"
