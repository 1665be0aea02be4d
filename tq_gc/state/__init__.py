"""State stores: `memory://` (embedded) and `redis://`, `rediss://`, `unix://` (shared). See base.py."""

from __future__ import annotations

from tq_gc.state.base import Lease, StateStore
from tq_gc.state.memory import MemoryState
from tq_gc.state.redis import RedisState
from tq_gc.state.url import parse_state_url

__all__ = ["Lease", "MemoryState", "RedisState", "StateStore", "open_state"]


def open_state(url: str, namespace: str) -> StateStore:
    """The store a state_url names; the caller owns it (close() it)."""
    if parse_state_url(url).is_memory:  # ConfigError if it names no state store
        return MemoryState(namespace)
    return RedisState.from_url(url, namespace)
