"""Whose an admission or a fence is: every registry writes its ids and fence names with a holder identity
of its own (a random id, and the process id), so that two workers holding `call-0`, or two ranks fencing
`ckpt-7` at once, each hold their own: one releasing or lowering its own leaves the other's in place, and
a fence is up until its last holder lowers it. Readers see the names as the publishers gave them.

    call-0@3f2a91c0.4242      stored: the publisher's name, SEPARATOR, the holder (hex id . pid)
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping

from tq_gc.state.base import AdmissionRows

SEPARATOR = "@"
_HOLDER = re.compile(r"[0-9a-f]{8}\.[0-9]+")


def new_holder() -> str:
    """A holder identity for this process: a random id (two registries of one process differ) and its pid."""
    return f"{secrets.token_hex(4)}.{os.getpid()}"


def held_name(name: str, holder: str) -> str:
    """The name as stored for `holder`."""
    return f"{name}{SEPARATOR}{holder}"


def public_name(stored: str) -> str:
    """The name as its publisher gave it; a stored name without a holder (written before holders, or
    straight to the state store) as it is."""
    name, separator, holder = stored.rpartition(SEPARATOR)
    return name if separator and name and _HOLDER.fullmatch(holder) else stored


def by_public_name(live: Mapping[str, AdmissionRows]) -> dict[str, AdmissionRows]:
    """Admissions as stored -> {admission_id as given: rows}; an id several holders hold has the rows of
    them all."""
    merged: dict[str, AdmissionRows] = {}
    for stored, rows in live.items():
        into = merged.setdefault(public_name(stored), {})
        for partition, keys in rows.items():
            into[partition] = list(dict.fromkeys([*into.get(partition, []), *keys]))
    return merged


def latest_by_public_name(expiries_ms: Mapping[str, int]) -> dict[str, int]:
    """Expiries as stored -> {admission_id as given: the latest of its holders' expiries}: the id is held
    until its last holder's admission ends."""
    latest: dict[str, int] = {}
    for stored, expires_at_ms in expiries_ms.items():
        name = public_name(stored)
        latest[name] = max(expires_at_ms, latest.get(name, expires_at_ms))
    return latest
