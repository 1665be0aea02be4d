"""The publisher API's input checks: every name, TTL and rows document a publisher hands in is refused with
ValueError before anything is written (the registry, the trainer kit and the sidecar's actor use them)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tq_gc.state.base import AdmissionRows


def checked_name(what: str, value: object) -> str:
    """`value` if it is a non-empty string; else ValueError naming `what`."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def checked_ttl_ms(ttl_seconds: float) -> int:
    """ttl_seconds in whole milliseconds (at least 1); ValueError unless a positive finite number."""
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float):
        raise ValueError(f"ttl_seconds must be a number of seconds, got {ttl_seconds!r}")
    if not math.isfinite(ttl_seconds) or ttl_seconds <= 0:
        raise ValueError(f"ttl_seconds must be positive and finite, got {ttl_seconds!r}")
    return max(1, math.ceil(ttl_seconds * 1000))


def checked_whole_ms(ttl_ms: object) -> int:
    """ttl_ms if it is a positive whole number of milliseconds (a backend's own unit); else ValueError."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise ValueError(f"ttl_ms must be a positive whole number of milliseconds, got {ttl_ms!r}")
    return ttl_ms


def checked_rows(rows: object) -> AdmissionRows:
    """{partition: [keys]}, copied. A bare string of keys is refused: it is a bug, not one key."""
    if not isinstance(rows, Mapping):
        raise ValueError(f"rows must be a mapping {{partition: [keys]}}, got {type(rows).__name__}")
    checked: AdmissionRows = {}
    for partition, keys in rows.items():
        if not isinstance(partition, str) or not partition:
            raise ValueError(f"rows: partition names must be non-empty strings, got {partition!r}")
        if isinstance(keys, str | bytes) or not isinstance(keys, list | tuple | set | frozenset):
            raise ValueError(
                f"rows[{partition!r}] must be a list of keys, got {type(keys).__name__} "
                f"(write {{{partition!r}: [key, ...]}})"
            )
        if not all(isinstance(key, str) and key for key in keys):
            raise ValueError(f"rows[{partition!r}]: every key must be a non-empty string")
        checked[partition] = list(keys)
    return checked
