"""Admissions as the collector reads them: one consistent snapshot of the registry per read, and a
cheap re-read before every delete batch. Publishers write through tq_gc.registry.AdmissionRegistry.
"""

from __future__ import annotations

from typing import Protocol

from tq_gc.errors import ReferenceSourceError, StoreUnavailable
from tq_gc.model import KeysByPartition
from tq_gc.state.base import AdmissionRows


class AdmissionSnapshots(Protocol):
    """What the collector reads of the registry: snapshots, and a version to tell when one is stale."""

    def live_admissions(self) -> dict[str, AdmissionRows]: ...
    def admissions_version(self) -> int: ...


class AdmissionsSource:
    """The ReferenceSource of live admissions: one consistent snapshot of the registry per read."""

    name = "admissions"

    def __init__(self, state: AdmissionSnapshots, expect_nonempty: bool = False) -> None:
        self._state = state
        self._expect_nonempty = expect_nonempty
        self._last: tuple[int, KeysByPartition] | None = None

    def read(self) -> KeysByPartition:
        """A fresh, complete snapshot: {partition: keys held}."""
        try:
            version = self._state.admissions_version()  # before the snapshot: never newer than it
            live = self._state.live_admissions()
        except StoreUnavailable as exc:
            raise ReferenceSourceError(self.name, str(exc)) from exc
        if self._expect_nonempty and not live:
            raise ReferenceSourceError(
                self.name,
                "no live admission, but admissions.expect_nonempty is set: are the publishers "
                "writing to this state_url and namespace?",
            )
        held: dict[str, set[str]] = {}
        for rows in live.values():
            for partition, keys in rows.items():
                held.setdefault(partition, set()).update(keys)
        snapshot = {partition: frozenset(keys) for partition, keys in held.items()}
        self._last = (version, snapshot)
        return snapshot

    def reread(self, version: int | None = None) -> KeysByPartition:
        """Admissions as of now: the last snapshot while no admission was recorded since, else a fresh one.

        The last snapshot may still hold admissions released or expired since: it protects more rows,
        never fewer, so reusing it is safe, and it makes the per-batch re-check cost no extra read.
        `version` is the registry's admissions_version read just now, if the caller has it.
        """
        if self._last is not None:
            try:
                current = self._state.admissions_version() if version is None else version
            except StoreUnavailable as exc:
                raise ReferenceSourceError(self.name, str(exc)) from exc
            if current == self._last[0]:
                return self._last[1]
        return self.read()

    def reread_keys(self, partition: str, version: int | None = None) -> frozenset[str]:
        """`reread(version)`, as the keys held in one partition."""
        return self.reread(version).get(partition, frozenset())
