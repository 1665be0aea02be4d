"""Admissions as the collector reads them: one consistent snapshot of the registry per read, and a
cheap re-read before every delete batch. Publishers write through tq_gc.publish.registry.AdmissionRegistry.
"""

from __future__ import annotations

from collections.abc import Iterable

from tq_gc.errors import ReferenceSourceError, StoreUnavailable
from tq_gc.rows import KeysByPartition
from tq_gc.state.base import AdmissionRows, AdmissionSnapshots


class HeldKeys:
    """The keys live admissions hold, {partition: keys}, kept from one read to the next: each read
    takes in only the admissions made, replaced or gone since the last, and rebuilds only the
    partitions they touch. At 1M rows (10,000 admissions holding 400,000 keys) building the sets
    afresh took ~70 ms of a read's ~170 ms, every sweep.

    While no admission has gone, keys are only added (set unions). The first read that must take keys
    out counts, once, how many admissions hold each key (~2x the unions' cost); from then on admissions
    are counted in and out."""

    def __init__(self) -> None:
        self._rows: dict[str, AdmissionRows] = {}  # admission id -> its rows, as last read
        self._counts: dict[str, dict[str, int]] | None = None  # partition -> key -> admissions holding it
        self._held: dict[str, frozenset[str]] = {}

    def update(self, live: dict[str, AdmissionRows]) -> KeysByPartition:
        """The keys `live` ({admission id: rows}, every live admission) holds. Takes `live` over, and
        never changes its rows (a store may share its own)."""
        last = self._rows
        gone = [rows for admission_id, rows in last.items() if not _same(live.get(admission_id), rows)]
        came = [rows for admission_id, rows in live.items() if not _same(last.get(admission_id), rows)]
        if gone and self._counts is None:
            self._counts = _counted(last.values(), 1, {})
        if self._counts is None:
            self._add(came)
        else:
            self._recount(gone, came, self._counts)
        self._rows = live
        return dict(self._held)

    def _add(self, came: list[AdmissionRows]) -> None:
        added: dict[str, set[str]] = {}
        for rows in came:
            for partition, keys in rows.items():
                added.setdefault(partition, set()).update(keys)
        for partition, new_keys in added.items():
            held = self._held.get(partition)
            if new_keys:
                self._held[partition] = frozenset(new_keys) if held is None else held | new_keys

    def _recount(
        self, gone: list[AdmissionRows], came: list[AdmissionRows], counts: dict[str, dict[str, int]]
    ) -> None:
        _counted(gone, -1, counts)
        _counted(came, 1, counts)
        for partition in {partition for rows in (*gone, *came) for partition in rows}:
            held = counts.get(partition)
            if held:
                self._held[partition] = frozenset(held)
            else:
                counts.pop(partition, None)
                self._held.pop(partition, None)


def _same(rows: AdmissionRows | None, other: AdmissionRows) -> bool:
    return rows is other or rows == other  # the store's own rows: the same object while unchanged


def _counted(
    admissions: Iterable[AdmissionRows], by: int, counts: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """`counts` (partition -> key -> admissions holding it) with each admission's keys counted `by`."""
    for rows in admissions:
        for partition, keys in rows.items():
            held = counts.setdefault(partition, {})
            for key in keys:
                count = held.get(key, 0) + by
                if count:
                    held[key] = count
                else:
                    del held[key]
    return counts


class AdmissionsSource:
    """The ReferenceSource of live admissions: one consistent snapshot of the registry per read."""

    name = "admissions"

    def __init__(self, state: AdmissionSnapshots, expect_nonempty: bool = False) -> None:
        self._state = state
        self._expect_nonempty = expect_nonempty
        self._last: tuple[int, KeysByPartition] | None = None
        self._held = HeldKeys()

    def read(self) -> KeysByPartition:
        """A fresh, complete snapshot: {partition: keys held}."""
        try:
            version = self._state.admissions_version()  # before the snapshot: never newer than it
            live = self._state.live_admission_rows()
        except StoreUnavailable as exc:
            raise ReferenceSourceError(self.name, str(exc)) from exc
        if self._expect_nonempty and not live:
            raise ReferenceSourceError(
                self.name,
                "no live admission, but admissions.expect_nonempty is set: are the publishers "
                "writing to this state_url and namespace?",
            )
        snapshot = self._held.update(live)
        self._last = (version, snapshot)
        return snapshot

    def reread(self, version: int | None = None) -> KeysByPartition:
        """Admissions as of now: the last snapshot while no admission was recorded since, else a fresh one.

        The last snapshot may still hold admissions released or expired since: it protects more rows,
        never fewer, so reusing it is safe.
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
