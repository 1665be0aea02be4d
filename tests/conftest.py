"""Shared fixtures: a real redis-server for the session, and the state store on every backend; the Ray
and TransferQueue fixtures (a plugin, support/ray_fixtures.py) for every suite that needs them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from tools.testbed.clock import ManualClock
from tools.testbed.redis_server import RedisServer
from tq_gc.state import MemoryState, RedisState, StateStore

from support.logger_state import tq_gc_logger_restored

pytest_plugins = ["support.ray_fixtures"]


@pytest.fixture(autouse=True)
def tq_gc_logger_as_found() -> Iterator[None]:
    """Undone after each test, so a later test's caplog sees the lines whichever tests ran before it in
    its process (pytest-xdist mixes the order)."""
    with tq_gc_logger_restored():
        yield


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's Redis, emptied before the test."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> Iterator[StateStore]:
    """A fresh state store: memory on a ManualClock, or Redis on its own (real) clock."""
    store: StateStore
    if request.param == "memory":
        store = MemoryState("test", clock_ms=ManualClock())
    else:
        store = RedisState.from_url(request.getfixturevalue("redis_url"), "test")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def advance(state: StateStore) -> Callable[[float], None]:
    """Let `seconds` pass on the store's clock: moves the manual clock, or sleeps for Redis."""
    clock = getattr(state, "clock_ms", None)
    if isinstance(clock, ManualClock):
        return clock.advance
    return time.sleep
