"""The first-seen records of the Redis state store: each partition's generations and tombstones
(tq_gc/state/generations.py), read field by field and saved by a Lua script only if still at the version read.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import cast

from tq_gc.errors import LeaseLost, StoreUnavailable
from tq_gc.first_seen import FirstSeen, FirstSeenRecords
from tq_gc.state import generations
from tq_gc.state import redis_scripts as scripts
from tq_gc.state.base import Lease
from tq_gc.state.keys import Keys
from tq_gc.state.redis_connection import RedisConnection

# Reads of a partition's records, or saves, before "kept changing" (only a lease holder writes them).
LAYOUT_READS = 3


class RedisFirstSeen:
    """One namespace's first-seen records, with what this store last loaded and saved of each partition."""

    def __init__(self, connection: RedisConnection, keys: Keys, namespace: str) -> None:
        self._connection = connection
        self._keys = keys
        self._namespace = namespace
        self._layouts: dict[str, generations.Layout] = {}  # loaded, for the save that follows
        self._saved: dict[str, generations.Saved] = {}  # our last save, for the load that follows
        register = connection.client.register_script
        self._save_first_seen = register(scripts.SAVE_FIRST_SEEN)
        self._forget_partition = register(scripts.FORGET_PARTITION)

    def load(self, partition: str) -> FirstSeenRecords:
        layout = self._read_layout(partition)
        self._layouts[partition] = layout  # what the next save rewrites, if still current then
        return layout.records

    def _read_layout(self, partition: str) -> generations.Layout:
        """The generations and tombstones, read field by field (no reply holds the whole partition),
        between two reads of the version: a save in between makes us read again. If the version is
        still that of our last save, only the tombstones are read."""
        key, gone = self._keys.first_seen(partition), self._keys.first_seen_tombstones(partition)
        version_field = generations.VERSION_FIELD
        kept = self._saved.pop(partition, None)
        with self._connection.guard(f"load first-seen times of {partition!r}"):
            if kept is not None:
                with self._connection.pipeline() as pipe:
                    pipe.hget(key, version_field)
                    pipe.lrange(gone, 0, -1)
                    pipe.hget(key, version_field)
                    version, tombstones, version_after = pipe.execute()
                if version == version_after == kept.version:
                    return generations.reload(partition, kept, tombstones)
            for _ in range(LAYOUT_READS):
                with self._connection.pipeline() as pipe:
                    pipe.hget(key, version_field)
                    pipe.hkeys(key)
                    version, names = pipe.execute()
                    names = [name for name in names if name != version_field]
                    for name in names:
                        pipe.hget(key, name)
                    pipe.lrange(gone, 0, -1)
                    pipe.hget(key, version_field)
                    *values, tombstones, version_after = pipe.execute()
                if version_after == version:
                    found = zip(names, values, strict=True)
                    fields = {name: value for name, value in found if value is not None}
                    return generations.decode(partition, version or "", fields, tombstones)
        raise StoreUnavailable(
            f"first-seen records of {partition!r} kept changing while read ({self._connection.url})"
        )

    def observed(self) -> dict[str, int]:
        with self._connection.guard("read when partitions were last observed"):
            marks = cast(dict[str, str], self._connection.client.hgetall(self._keys.observed))
        return {partition: int(at_ms) for partition, at_ms in marks.items()}

    def save(
        self,
        lease: Lease,
        partition: str,
        upserts: Mapping[str, FirstSeen],
        drops: Iterable[str],
        observed_ms: int,
        generation_rows: int,
    ) -> None:
        # Computed from the records as last loaded (or read now), written only if they are still at
        # that version: the generations a save rewrites must be the ones it read.
        keys = self._script_keys(partition)
        dropped = list(drops)
        for _ in range(LAYOUT_READS):
            layout = self._layouts.pop(partition, None) or self._read_layout(partition)
            change = generations.rewrite(layout, upserts, dropped, generation_rows)
            version = secrets.token_hex(8)
            args: list[str | int] = [
                lease.token, partition, observed_ms, layout.version, version, layout.tombstones,
                len(change.delete_fields), *change.delete_fields,
                *(item for pair in change.set_fields.items() for item in pair),
            ]  # fmt: skip
            with self._connection.guard(f"save first-seen times of {partition!r}"):
                done = self._save_first_seen(keys=keys, args=args)
            if done == 0:
                raise LeaseLost(self._namespace)
            if done == 1:
                self._saved[partition] = generations.saved(layout, change, version)
                return
        raise StoreUnavailable(
            f"first-seen records of {partition!r} kept changing while saved ({self._connection.url})"
        )

    def forget(self, lease: Lease, partition: str) -> None:
        self._layouts.pop(partition, None)
        self._saved.pop(partition, None)
        keys = self._script_keys(partition)
        with self._connection.guard(f"forget first-seen times of {partition!r}"):
            done = self._forget_partition(keys=keys, args=[lease.token, partition])
        if not done:
            raise LeaseLost(self._namespace)

    def _script_keys(self, partition: str) -> list[str]:
        """KEYS of the save and forget scripts: lease, generations, observed, tombstones, the old hash."""
        return [
            self._keys.lease,
            self._keys.first_seen(partition),
            self._keys.observed,
            self._keys.first_seen_tombstones(partition),
            self._keys.legacy_first_seen(partition),
        ]
