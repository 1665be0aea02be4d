"""The admissions of the Redis state store: recorded, renewed and read by Lua scripts whose expiries are
computed on the Redis clock, and the barrier a sweeper reads of those made while it holds the lease.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import cast

from tq_gc.errors import BarrierLost, LeaseLost
from tq_gc.state import redis_barrier
from tq_gc.state import redis_scripts as scripts
from tq_gc.state.base import AdmissionRows, Lease, new_version
from tq_gc.state.keys import Keys
from tq_gc.state.redis_barrier import BarrierCopy
from tq_gc.state.redis_connection import RedisConnection


class RedisAdmissions:
    """One namespace's admissions, with the documents this store last read of them."""

    def __init__(self, connection: RedisConnection, keys: Keys, namespace: str) -> None:
        self._connection = connection
        self._keys = keys
        self._namespace = namespace
        # admission id -> (its document, the rows decoded from it), as last read
        self._admissions_read: dict[str, tuple[str, AdmissionRows]] = {}
        self._barrier = BarrierCopy()
        register = connection.client.register_script
        self._admit = register(scripts.ADMIT)
        self._renew_admission = register(scripts.RENEW_ADMISSION)
        self._live_admissions = register(scripts.LIVE_ADMISSIONS)
        self._admitted_since = register(scripts.ADMITTED_SINCE)

    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        keys = [
            self._keys.admission_expiry,
            self._keys.admission_rows,
            self._keys.admission_version,
            self._keys.lease,
            self._keys.admission_barrier,
        ]
        with self._connection.guard(f"record admission {admission_id!r}"):
            self._admit(keys=keys, args=[admission_id, json.dumps(rows), ttl_ms, new_version()])
        self._connection.replicated(f"record admission {admission_id!r}")

    def renew(self, admission_id: str, ttl_ms: int) -> bool:
        with self._connection.guard(f"renew admission {admission_id!r}"):
            renewed = self._renew_admission(keys=[self._keys.admission_expiry], args=[admission_id, ttl_ms])
        return bool(renewed)

    def release(self, admission_id: str) -> None:
        with (
            self._connection.guard(f"release admission {admission_id!r}"),
            self._connection.client.pipeline() as pipe,
        ):
            pipe.zrem(self._keys.admission_expiry, admission_id)
            pipe.hdel(self._keys.admission_rows, admission_id)
            pipe.execute()

    def live_rows(self) -> dict[str, AdmissionRows]:
        """A document read last time as well is not decoded again: 10,000 admissions holding 400,000
        keys took ~65 ms to decode, every sweep. The rows are kept by their document, never changed."""
        keys = [self._keys.admission_expiry, self._keys.admission_rows]
        with self._connection.guard("read live admissions"):
            flat = self._live_admissions(keys=keys)
        last, read = self._admissions_read, {}
        for admission_id, document in zip(flat[::2], flat[1::2], strict=True):
            kept = last.get(admission_id)
            read[admission_id] = (
                kept
                if kept is not None and kept[0] == document
                else (document, redis_barrier.decoded_rows(document))
            )
        self._admissions_read = read
        return {admission_id: rows for admission_id, (_, rows) in read.items()}

    def expiries(self, now_ms: int) -> dict[str, int]:
        """{admission_id: expires_at_ms} of the admissions not expired at `now_ms` (the store's clock)."""
        with self._connection.guard("read the admissions' expiries"):
            scored = cast(
                list[tuple[str | bytes, float]],
                self._connection.client.zrangebyscore(
                    self._keys.admission_expiry, f"({now_ms}", "+inf", withscores=True
                ),
            )
        return {_text(admission_id): int(expires_at_ms) for admission_id, expires_at_ms in scored}

    def admitted_since_lease(self, lease: Lease, partition: str, keys: Collection[str]) -> set[str]:
        """Reads only the barrier's documents added since this store last read it for this lease (each
        admission's rows are decoded once per sweep), then answers from its copy."""
        copy = self._barrier.for_lease(lease.token)
        with self._connection.guard("read the admission barrier"):
            answer = self._admitted_since(
                keys=[self._keys.lease, self._keys.admission_barrier], args=[lease.token, copy.read]
            )
        if answer == 0:
            raise LeaseLost(self._namespace)
        if answer == -1:
            raise BarrierLost(self._namespace)
        copy.take(answer[1])
        held = copy.keys.get(partition)
        return set() if held is None else held.intersection(keys)

    def version(self) -> int:
        with self._connection.guard("read the admissions version"):
            return int(cast(str | None, self._connection.client.get(self._keys.admission_version)) or 0)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
