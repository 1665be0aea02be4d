"""What the rows cost and how much room is left: pure data, no I/O.

- `Bytes`: a sweep's in-scope bytes by what became of their rows (orphans: eligible or within grace;
  referenced; reclaimed), from the plan's buckets and the sizes the row store read in its listing.
- `StorageFill`: each TransferQueue storage unit's capacity and active keys (its `GET_METRICS`), and
  the store's headroom. TQ puts row `global_index` on unit `global_index % num_units`, and a put into a
  full unit fails (`Storage capacity exceeded`, no blocking, no eviction): the fullest unit binds.

Their JSON (to_dict) is part of the sweep report (a contract): fields are added, never renamed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields
from functools import partial
from itertools import repeat
from typing import Any

from tq_gc.decisions import KEEP_BY_SOURCE, PLANNED, Decision
from tq_gc.row_sizes import RowSizes
from tq_gc.rows import Listing

SizesByPartition = Mapping[str, Mapping[str, int]]

_REFERENCED = tuple(KEEP_BY_SOURCE.values())


@dataclass(slots=True)
class Bytes:
    """A sweep's in-scope bytes. `orphaned` = `eligible` + `within_grace` (unreferenced rows); `sized_rows`
    and `unsized_rows` count the in-scope rows whose size the store did or did not read (a store that
    reads none, or a row with only non-tensor values on TQ's SimpleStorage, which records no size)."""

    orphaned: int = 0
    eligible: int = 0
    within_grace: int = 0
    referenced: int = 0
    reclaimed: int = 0
    sized_rows: int = 0
    unsized_rows: int = 0

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object] | None) -> Bytes:
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in (data or {}).items() if k in known and isinstance(v, int)})


def bytes_of(
    buckets: Mapping[Decision, Mapping[str, Iterable[str]]],
    sizes: SizesByPartition,
    listing: Listing | None = None,
) -> Bytes:
    """The in-scope bytes of a plan's buckets ({decision: {partition: keys}}), by the rows' `sizes`.

    With the `listing` the plan was made from, a partition whose listed rows are all in scope and whose
    sized rows are all listed has its referenced bytes derived from its total: one lookup per orphan, not
    per row (a steady job holds many referenced rows and few orphans)."""
    found = Bytes()
    for partition in {partition for by_partition in buckets.values() for partition in by_partition}:
        rows: dict[Decision, AbstractSet[str]] = {
            decision: _as_set(buckets.get(decision, {}).get(partition, ())) for decision in PLANNED
        }
        listed = None if listing is None else listing.get(partition)
        _add_partition(found, rows, sizes.get(partition, {}), listed)
    found.orphaned = found.eligible + found.within_grace
    return found


@dataclass(frozen=True, slots=True)
class _Summed:
    bytes: int
    sized: int
    unsized: int


def _add_partition(
    found: Bytes,
    rows: Mapping[Decision, AbstractSet[str]],
    known: Mapping[str, int],
    listed: Mapping[str, object] | None,
) -> None:
    """Add one partition's buckets. Sizes read in the very listing the plan was made from (RowSizes
    covering `listed`) are summed without a lookup per row (row_sizes.py); where every listed row is in
    scope, the referenced bytes are the listing's total less the orphans'."""
    summed: Callable[..., _Summed]
    if isinstance(known, RowSizes) and listed is not None and known.covers(listed):
        summed, total = partial(_summed, known), known.total
        whole = sum(map(len, rows.values())) == len(listed)
    else:
        summed, total = partial(_looked_up, known), lambda: (sum(known.values()), len(known))
        whole = listed is not None and _all_listed_in_scope(rows, known, listed)
    eligible = summed(rows[Decision.DELETE], rows[Decision.KEEP_OVER_CAP])
    within_grace = summed(rows[Decision.KEEP_GRACE])
    referenced_rows = [rows[decision] for decision in _REFERENCED]
    if whole:
        total_bytes, total_sized = total()
        sized = total_sized - eligible.sized - within_grace.sized
        referenced_count = sum(map(len, referenced_rows))
        orphaned_bytes = eligible.bytes + within_grace.bytes
        referenced = _Summed(total_bytes - orphaned_bytes, sized, referenced_count - sized)
    else:
        referenced = summed(*referenced_rows)
    _add(found, eligible, within_grace, referenced)


def _summed(known: RowSizes, *groups: AbstractSet[str]) -> _Summed:
    summed = sized = count = 0
    for rows in groups:
        group_bytes, group_sized = known.listed_bytes(rows)
        summed, sized, count = summed + group_bytes, sized + group_sized, count + len(rows)
    return _Summed(summed, sized, count - sized)


def _add(found: Bytes, eligible: _Summed, within_grace: _Summed, referenced: _Summed) -> None:
    found.eligible += eligible.bytes
    found.within_grace += within_grace.bytes
    found.referenced += referenced.bytes
    found.sized_rows += eligible.sized + within_grace.sized + referenced.sized
    found.unsized_rows += eligible.unsized + within_grace.unsized + referenced.unsized


def _all_listed_in_scope(
    rows: Mapping[Decision, AbstractSet[str]], known: Mapping[str, int], listed: Mapping[str, object]
) -> bool:
    """Every listed row is in the plan (in-scope rows are listed ones: equal counts) and every sized
    row is listed (a store's sizes may be newer than its listing): then the sized rows are exactly
    the planned rows with a size."""
    return sum(map(len, rows.values())) == len(listed) and known.keys() <= listed.keys()


def _looked_up(known: Mapping[str, int], *groups: AbstractSet[str]) -> _Summed:
    """The bytes of `groups`' rows, one lookup a row at C speed (a loop per row was 10-20 ms at 100k)."""
    summed = sized = unsized = 0
    for rows in groups:
        found_sizes = list(map(known.get, rows))
        missing = found_sizes.count(None)
        unsized += missing
        sized += len(found_sizes) - missing
        summed += sum(filter(None, found_sizes))
    return _Summed(summed, sized, unsized)


def _as_set(keys: Iterable[str]) -> AbstractSet[str]:
    return keys if isinstance(keys, (set, frozenset)) else set(keys)


def bytes_of_keys(
    sizes: Mapping[str, int], keys: Collection[str], listed: Mapping[str, object] | None = None
) -> int:
    """The bytes of `keys` whose size is known. With the `listed` rows `keys` are among (the listing
    the plan was made from, for the rows a sweep deleted), no lookup per row where the sizes were read
    in that listing (row_sizes.py)."""
    if isinstance(sizes, RowSizes) and listed is not None and sizes.covers(listed):
        return sizes.listed_bytes(keys)[0]
    return sum(map(sizes.get, keys, repeat(0)))


@dataclass(frozen=True, slots=True)
class UnitFill:
    """One storage unit: its `capacity` in rows (None: unlimited) and the rows it holds (`active_keys`)."""

    unit: str
    capacity: int | None
    active_keys: int

    @property
    def free_rows(self) -> int | None:
        return None if self.capacity is None else max(0, self.capacity - self.active_keys)

    @property
    def headroom(self) -> float | None:
        """The fraction of its capacity still free, None if unlimited."""
        if self.capacity is None:
            return None
        return 1.0 if self.capacity <= 0 else max(0.0, 1.0 - self.active_keys / self.capacity)


@dataclass(frozen=True)
class Leftovers:
    """Storage cells at global indexes no partition owns (stores/transferqueue/leftovers.py): how many,
    their bytes, by unit; whether any was reclaimed, and if not, why."""

    cells: int = 0
    bytes: int = 0
    by_unit: dict[str, int] = field(default_factory=dict)
    indexes: tuple[int, ...] = ()
    reclaimed: int = 0
    why_not_reclaimed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cells": self.cells,
            "bytes": self.bytes,
            "units": dict(self.by_unit),
            "sample": list(self.indexes[:20]),
            "reclaimed": self.reclaimed,
            "why_not_reclaimed": self.why_not_reclaimed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Leftovers | None:
        if not data:
            return None
        return cls(
            int(data["cells"]),
            int(data["bytes"]),
            {str(k): int(v) for k, v in data["units"].items()},
            tuple(int(i) for i in data.get("sample", [])),
            int(data.get("reclaimed", 0)),
            data.get("why_not_reclaimed"),
        )


@dataclass(frozen=True, slots=True)
class StorageFill:
    """The store's storage units as read at one moment; `unread` says why some or all could not be."""

    units: tuple[UnitFill, ...] = ()
    unread: str | None = None
    leftovers: Leftovers | None = None  # only where the audit ran (storage_audit: true)

    @property
    def bounded(self) -> tuple[UnitFill, ...]:
        return tuple(unit for unit in self.units if unit.capacity is not None)

    @property
    def headroom(self) -> float | None:
        """The fullest bounded unit's free fraction (it fails the next put that lands on it), None if no
        unit is bounded or none was read."""
        return min((u.headroom for u in self.bounded if u.headroom is not None), default=None)

    @property
    def free_rows(self) -> int | None:
        """Rows the fullest unit still takes (rows spread evenly over the units by global index)."""
        return min((u.free_rows for u in self.bounded if u.free_rows is not None), default=None)

    @property
    def capacity(self) -> int | None:
        return sum(u.capacity or 0 for u in self.bounded) if self.bounded else None

    @property
    def active_keys(self) -> int:
        return sum(u.active_keys for u in self.units)

    def under_pressure(self, threshold: float | None) -> bool:
        """Whether the headroom is below `threshold` (a fraction; None: no threshold set)."""
        headroom = self.headroom
        return threshold is not None and headroom is not None and headroom < threshold

    def to_dict(self) -> dict[str, object]:
        headroom = self.headroom
        return {
            "units": [
                {"unit": u.unit, "capacity": u.capacity, "active_keys": u.active_keys} for u in self.units
            ],
            "capacity": self.capacity,
            "active_keys": self.active_keys,
            "headroom": None if headroom is None else round(headroom, 6),
            "free_rows": self.free_rows,
            "unread": self.unread,
            "leftovers": None if self.leftovers is None else self.leftovers.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object] | None) -> StorageFill | None:
        if not data:
            return None
        units = data.get("units") or []
        assert isinstance(units, list)
        return cls(
            tuple(UnitFill(str(u["unit"]), u.get("capacity"), int(u["active_keys"])) for u in units),
            data.get("unread") if isinstance(data.get("unread"), str) else None,  # type: ignore[arg-type]
            Leftovers.from_dict(data.get("leftovers")),  # type: ignore[arg-type]
        )


def orphan_growth_per_hour(samples: Iterable[tuple[float, int]]) -> float | None:
    """Orphan rows gained per hour between the oldest and the newest of `samples` ((unix seconds,
    orphan rows) of successful sweeps), None with fewer than two sweeps or no time between them.
    Negative when sweeps reclaim faster than the job leaks."""
    ordered = sorted(samples)
    if len(ordered) < 2 or ordered[-1][0] <= ordered[0][0]:
        return None
    (first_s, first_rows), (last_s, last_rows) = ordered[0], ordered[-1]
    return (last_rows - first_rows) * 3600.0 / (last_s - first_s)


def minutes_to_full(free_rows: int | None, rows_per_hour: float | None) -> float | None:
    """At `rows_per_hour` of growth, minutes until the fullest unit has no room (rows spread over the
    units evenly, so its share of the growth is its share of the capacity: a caller passes the growth of
    that unit, or the store's growth and the store's free rows). None if it does not grow."""
    if free_rows is None or rows_per_hour is None or rows_per_hour <= 0:
        return None
    return free_rows * 60.0 / rows_per_hour
