"""The state store remembers how many references each reference source yielded at the last sweep that
read them all (the collector's "held references last sweep and none now" rule): both backends."""

from __future__ import annotations

import pytest

from tools.testbed.redis_server import RedisServer
from tq_gc.errors import LeaseLost, StoreUnavailable
from tq_gc.state import RedisState, StateStore

MANIFESTS = "manifests:/ckpt/**/gc-manifest.json"
TAGS = "tag_references:rollout_data:route_assembly_plan.cleanup_staging_keys:rollout_staging"


def test_source_counts_start_empty_and_read_back_as_recorded(state: StateStore) -> None:
    assert state.source_counts() == {}
    lease = state.acquire_lease("sweeper", 60_000)
    assert lease is not None
    state.record_source_counts(lease, {MANIFESTS: 812, TAGS: 0})
    assert state.source_counts() == {MANIFESTS: 812, TAGS: 0}


def test_recording_replaces_every_count(state: StateStore) -> None:
    """A source left out of the config is forgotten: only the sources of the last sweep are compared."""
    lease = state.acquire_lease("sweeper", 60_000)
    assert lease is not None
    state.record_source_counts(lease, {MANIFESTS: 3, TAGS: 5})
    state.record_source_counts(lease, {TAGS: 7})
    assert state.source_counts() == {TAGS: 7}
    state.record_source_counts(lease, {})
    assert state.source_counts() == {}


def test_a_sweeper_without_the_lease_records_no_counts(state: StateStore) -> None:
    lease = state.acquire_lease("sweeper", 60_000)
    assert lease is not None
    state.record_source_counts(lease, {MANIFESTS: 3})
    state.release_lease(lease)
    other = state.acquire_lease("other", 60_000)
    assert other is not None
    with pytest.raises(LeaseLost):
        state.record_source_counts(lease, {MANIFESTS: 0})
    assert state.source_counts() == {MANIFESTS: 3}


def test_source_counts_are_per_namespace(redis_url: str) -> None:
    job, other = RedisState.from_url(redis_url, "job-1"), RedisState.from_url(redis_url, "job-2")
    try:
        lease = job.acquire_lease("sweeper", 60_000)
        assert lease is not None
        job.record_source_counts(lease, {MANIFESTS: 4})
        assert other.source_counts() == {}
    finally:
        job.close()
        other.close()


def test_source_counts_raise_store_unavailable_once_redis_is_gone() -> None:
    with RedisServer() as server:
        store = RedisState.from_url(server.url, "job")
        lease = store.acquire_lease("sweeper", 60_000)
        assert lease is not None
        server.stop()
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{server.port}"):
            store.source_counts()
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{server.port}"):
            store.record_source_counts(lease, {MANIFESTS: 1})
        store.close()
