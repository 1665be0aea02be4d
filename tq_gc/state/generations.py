"""First-seen records in Redis as generations: the rows one save first saw, a few large fields.

    tqgc:{ns}:sightings:<part>        HASH  'version'       -> a random token, new with every save
                                            'g:<at_ms>:<n>' -> JSON [keys, digests, indexes]: chunk n of
                                                               the rows first seen at at_ms
    tqgc:{ns}:sightings:<part>:gone   LIST  JSON [keys] per confirmed delete batch (tombstones)

A million-row partition is a few dozen fields: loading it is a few large JSON decodes and bulk dict
updates, not one string split and two tuples per row, and a confirmed delete batch appends one
tombstone instead of deleting two thousand fields. The lease holder's next save rewrites only the
generations that lost rows (to tombstones, drops or rows seen afresh) and trims the tombstones it read,
in one step; every tombstone is therefore newer than every generation, and applies to all of them.

Pure: decoding and the rewrite a save makes. tq_gc/state/redis.py does the reading and writing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tq_gc.model import FirstSeen
from tq_gc.sightings import Sightings

log = logging.getLogger(__name__)

VERSION_FIELD = "version"
GENERATION_PREFIX = "g:"


@dataclass(frozen=True)
class Layout:
    """A partition's records as read, and where each lives: what a save needs to rewrite them."""

    version: str  # '' before the first save
    sightings: Sightings  # tombstoned rows already removed
    fields_by_at: dict[int, list[str]] = field(default_factory=dict)
    gone_at: dict[str, int] = field(default_factory=dict)  # tombstoned keys: their generation's at_ms
    tombstones: int = 0  # tombstone entries read (the oldest of the list)
    unreadable: tuple[str, ...] = ()  # fields to delete at the next save
    rewrite_all: bool = False  # every generation is written again at the next save


@dataclass(frozen=True)
class Rewrite:
    delete_fields: list[str]
    set_fields: dict[str, str]


def decode(partition: str, version: str, fields: Mapping[str, str], tombstones: Sequence[str]) -> Layout:
    """The records of generation fields and tombstones as read from Redis.

    A generation that cannot be read is forgotten (its rows start their grace again: later deletes,
    never earlier ones). A tombstone that cannot be read forgets every record: it named rows deleted
    since, and a row recreated under such a key must not inherit the old row's time."""
    generations, unreadable = _parse_names(fields)
    sightings = Sightings()
    fields_by_at: dict[int, list[str]] = {}
    rows = 0
    for at_ms, name in generations:  # oldest first: should a key be in two, the later sighting wins
        try:
            keys, digests, indexes = json.loads(fields[name])
            sightings.add(at_ms, keys, digests, indexes)
        except (ValueError, TypeError):
            unreadable.append(name)
            continue
        fields_by_at.setdefault(at_ms, []).append(name)
        rows += len(keys)
    # A key in two generations (a save cut short by hand?): rewriting every generation sorts it out.
    everywhere = len(sightings) < rows
    try:
        gone = [key for entry in tombstones for key in json.loads(entry)]
    except (ValueError, TypeError):
        log.warning("unreadable tombstone in partition %r: every first-seen record forgotten", partition)
        everything = tuple(name for names in fields_by_at.values() for name in names) + tuple(unreadable)
        return Layout(version, Sightings(), tombstones=len(tombstones), unreadable=everything)
    if unreadable:
        log.warning("ignored %d unreadable first-seen generations of %r", len(unreadable), partition)
    gone_at = {key: sightings.at_ms[key] for key in gone if key in sightings.at_ms}
    sightings.discard(gone_at)
    return Layout(
        version, sightings, fields_by_at, gone_at, len(tombstones), tuple(unreadable), rewrite_all=everywhere
    )


def rewrite(
    layout: Layout, upserts: Mapping[str, FirstSeen], drops: Iterable[str], chunk_rows: int
) -> Rewrite:
    """The fields a save deletes and sets: every generation that loses a row is written again without
    it, every row upserted joins the generation of its time. A key both upserted and dropped is dropped."""
    records = layout.sightings
    dropped = set(drops)
    fresh = {key: record for key, record in upserts.items() if key not in dropped}
    leaving = (dropped | fresh.keys()) & records.keys()
    touched = {records.at_ms[key] for key in leaving} | set(layout.gone_at.values())
    touched |= {record.at_ms for record in fresh.values()} & layout.fields_by_at.keys()
    if layout.rewrite_all:
        touched |= layout.fields_by_at.keys()
    members: dict[int, list[str]] = {at_ms: [] for at_ms in touched}
    if touched:
        for key, at_ms in records.at_ms.items():
            if at_ms in touched and key not in leaving:
                members[at_ms].append(key)
    columns = {at_ms: _columns(records, keys) for at_ms, keys in members.items()}
    for key, (at_ms, (digest, index)) in fresh.items():
        keys, digests, indexes = columns.setdefault(at_ms, ([], [], []))
        keys.append(key)
        digests.append(digest)
        indexes.append(index)
    delete_fields = [name for at_ms in sorted(touched) for name in layout.fields_by_at.get(at_ms, ())]
    set_fields: dict[str, str] = {}
    for at_ms, (keys, digests, indexes) in sorted(columns.items()):
        for n, start in enumerate(range(0, len(keys), chunk_rows)):
            end = start + chunk_rows
            set_fields[f"{GENERATION_PREFIX}{at_ms}:{n}"] = json.dumps(
                [keys[start:end], digests[start:end], indexes[start:end]], separators=(",", ":")
            )
    return Rewrite(delete_fields + list(layout.unreadable), set_fields)


def _parse_names(fields: Iterable[str]) -> tuple[list[tuple[int, str]], list[str]]:
    generations: list[tuple[int, int, str]] = []
    unreadable: list[str] = []
    for name in fields:
        if name == VERSION_FIELD:
            continue
        prefix, _, rest = name.partition(GENERATION_PREFIX)
        at_ms, _, n = rest.partition(":")
        try:
            if prefix:
                raise ValueError(name)
            generations.append((int(at_ms), int(n), name))
        except ValueError:
            unreadable.append(name)
    return [(at_ms, name) for at_ms, _, name in sorted(generations)], unreadable


def _columns(records: Sightings, keys: list[str]) -> tuple[list[str], list[str], list[int | None]]:
    digests, indexes = records.digests, records.indexes
    return keys, [digests[key] for key in keys], [indexes[key] for key in keys]
