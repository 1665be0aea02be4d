"""The TQ claim knows a state store by what it is, on a real Redis: the id written once into the store
and read back by every sweeper, whatever URL reached it.

Before, the claim compared URL strings: `redis://h/0?db=1` read as database 0 (redis-py uses 1, the
query wins), so two state stores looked like one and both swept one TQ; `localhost` and `127.0.0.1` (or
two pods' `localhost`) looked like two stores for one, or one for two.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tq_gc.state import MemoryState, RedisState
from tq_gc.state.keys import STORE_ID_KEY
from tq_gc.stores.claims import state_identity

NAMESPACE = "job-1"


@pytest.fixture
def port(redis_url: str) -> Iterator[int]:
    """The session server's port, with databases 1 and 2 left as they were found."""
    client = redis.Redis.from_url(redis_url)
    port = int(client.connection_pool.connection_kwargs["port"])
    client.close()
    yield port
    for db in (1, 2):
        cleanup = redis.Redis(port=port, db=db)
        cleanup.delete(STORE_ID_KEY)
        cleanup.close()


def identity_of(url: str, namespace: str = NAMESPACE) -> str:
    state = RedisState.from_url(url, namespace)
    try:
        return state_identity(state)
    finally:
        state.close()


def test_two_spellings_of_one_database_are_one_store(port: int) -> None:
    spellings = [
        f"redis://127.0.0.1:{port}/0?db=1",  # the query's db wins, as in redis-py
        f"redis://localhost:{port}/1",
        f"redis://LOCALHOST:{port}?db=1",
        f"redis://:ignored-password@127.0.0.1:{port}/1",
    ]
    assert len({identity_of(url) for url in spellings}) == 1


def test_two_databases_behind_one_spelling_variant_are_two_stores(port: int) -> None:
    # The path says 0 in both: only the query tells the databases apart.
    assert identity_of(f"redis://127.0.0.1:{port}/0?db=1") != identity_of(f"redis://127.0.0.1:{port}/0?db=2")
    assert identity_of(f"redis://127.0.0.1:{port}/0?db=1") != identity_of(f"redis://127.0.0.1:{port}/0")


def test_the_id_is_written_once_and_read_back_by_every_sweeper(port: int) -> None:
    first = identity_of(f"redis://127.0.0.1:{port}/2")
    assert identity_of(f"redis://localhost:{port}/2") == first
    assert redis.Redis(port=port, db=2, decode_responses=True).get(STORE_ID_KEY) in first


def test_a_namespace_is_its_own_view_of_one_store(port: int) -> None:
    assert identity_of(f"redis://127.0.0.1:{port}/1", "job-1") != identity_of(
        f"redis://localhost:{port}/1", "job-2"
    )


def test_each_memory_store_is_its_own() -> None:
    one, other = MemoryState(NAMESPACE), MemoryState(NAMESPACE)
    assert state_identity(one) == state_identity(one)
    assert state_identity(one) != state_identity(other)
