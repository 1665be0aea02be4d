"""A state store whose record of what the reference sources named is older than a grace: the store of
a job that has been swept for a while, where an empty source is judged against that record alone. A
fresh store skips a sweep on an empty source until its record is a grace old (references/emptied.py),
so a test about anything else starts from this."""

from __future__ import annotations

from tq_gc.state import MemoryState, RedisState, StateStore
from tq_gc.state.keys import Keys

OLDER_THAN_ANY_GRACE_MS = 10 * 365 * 24 * 3600 * 1000


def with_old_baseline(state: StateStore) -> StateStore:
    """Give `state` a source baseline begun long ago, unless it has one; returns it."""
    if state.source_baseline_since_ms() is not None:
        return state
    since_ms = state.now_ms() - OLDER_THAN_ANY_GRACE_MS
    if isinstance(state, MemoryState):
        state._source_counts_since_ms = since_ms
    elif isinstance(state, RedisState):
        state._connection.client.set(Keys(state.namespace).source_counts_since, since_ms, nx=True)
    else:
        raise TypeError(f"no way to seed a baseline in {type(state).__name__}")
    return state
