"""State stores: `memory://` (embedded) and `redis://`, `rediss://`, `unix://` (shared). See base.py."""

from __future__ import annotations

from urllib.parse import urlsplit

from tq_gc.config.models import MEMORY_SCHEME, REDIS_SCHEMES, not_a_state_url
from tq_gc.errors import ConfigError
from tq_gc.state.base import Lease, StateStore
from tq_gc.state.memory import MemoryState
from tq_gc.state.redis import RedisState

__all__ = ["Lease", "MemoryState", "RedisState", "StateStore", "open_state"]


def open_state(url: str, namespace: str) -> StateStore:
    """The store a state_url names; the caller owns it (close() it)."""
    scheme = urlsplit(url).scheme
    if scheme == MEMORY_SCHEME:
        return MemoryState(namespace)
    if scheme in REDIS_SCHEMES:
        return RedisState.from_url(url, namespace)
    raise ConfigError(not_a_state_url(url))
