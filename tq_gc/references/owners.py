"""Owner references: a row is referenced while its owner row exists (Kubernetes' ownerReferences).

verl keeps one prompt row per group, keyed `{uid}`, beside the group's trajectory rows keyed
`{uid}_{session_id}_{index}`, until its replay buffer samples the group: then the prompt row goes at
once and the trajectories stay in the trainer's hands for the whole step, held by the trainer
integration's admissions (tq_gc.integrations.verl), not by this rule. With the scope entry

    scope:
      - partition: train
        key_pattern: '^(?P<uid>[^_]+)_[^_]+_\\d+$'
        owner: {key: '{uid}', has_tag: is_prompt}

a trajectory is referenced while `train` holds the row `{uid}` tagged is_prompt. The owner's key comes
from the row's key (the entry's pattern, which the whole key must match, whose named groups fill the
`owner.key` template); `has_tag` makes an owner row count only while that tag is true on it. A row the
pattern does not match is out of scope, never deleted; a row whose owner is absent is unreferenced, and
its grace runs as always.

Owners are looked up in the sweep's own listing of the partition (one snapshot, read in the tags' slot: see
sweep.observe.Observer.read). Fails closed: a match that leaves a group of the template unset fails the
source. A rule that owns nothing is believed: its owners come from the same listing as its rows
(config.sources.OwnerReference.when_empty). So is a rule whose partition the row store does not have (verl's
`val` before its first validation, or a typo): its rows would be there too, and there is none to keep or to
delete; the sweep warns of the partition (scope_partition_missing), as of any scope partition it lacks. A
partition the job writes between the store naming its partitions and the sweep listing them is read from
the listing: its owner rows keep their rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tq_gc.config import OwnerReference, compile_key_pattern
from tq_gc.errors import ReferenceSourceError
from tq_gc.formats.keytemplate import KeyTemplate
from tq_gc.referenced import Source
from tq_gc.references.listed import ListedRows
from tq_gc.rows import KeysByPartition, Listing, Tags
from tq_gc.stores.base import RowStore

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OwnerSummary:
    """What one owner reference found (for `tq-gc check`): rows of its partition, rows it matched,
    and of those, how many have their owner (kept) and how many do not (unreferenced)."""

    partition: str
    rows: int
    matched: int
    owned: int

    @property
    def orphaned(self) -> int:
        return self.matched - self.owned


class OwnersSource:
    """Every row whose configured owner row exists."""

    name: str = Source.OWNERS.value

    def __init__(self, references: Sequence[OwnerReference], row_store: RowStore) -> None:
        self._rules = tuple(_Rule.of(reference) for reference in references)
        self._listed = ListedRows(Source.OWNERS, row_store)
        self.counts: dict[str, int] = {}  # {reference's source_id: rows whose owner exists}, last read

    @property
    def partitions(self) -> list[str]:
        """The partitions this source reads (rows and owners share each): a collector that lists them
        anyway can pass its listing."""
        return list(dict.fromkeys(rule.reference.partition for rule in self._rules))

    def read(self, listed: Listing | None = None, existing: Collection[str] | None = None) -> KeysByPartition:
        """{partition: keys} of the rows whose owner exists. `listed` ({partition: {key: tags}}) replaces
        listing a partition the caller listed this sweep; `existing` (the row store's partitions)
        replaces asking the store which partitions exist."""
        owned: dict[str, set[str]] = {}
        self.counts = {}
        for rule, found in self._matched(listed, existing):
            self.counts[rule.reference.source_id] = len(found.owned)
            owned.setdefault(rule.reference.partition, set()).update(found.owned)
        return {partition: frozenset(keys) for partition, keys in owned.items()}

    def describe(
        self, listed: Listing | None = None, existing: Collection[str] | None = None
    ) -> list[OwnerSummary]:
        """What each reference finds now, in config order (raises ReferenceSourceError like read)."""
        return [
            OwnerSummary(rule.reference.partition, found.rows, found.matched, len(found.owned))
            for rule, found in self._matched(listed, existing)
        ]

    def _matched(
        self, listed: Listing | None, existing: Collection[str] | None
    ) -> Iterator[tuple[_Rule, _Found]]:
        """Each rule with what it found in its partition."""
        if not self._rules:
            return
        known = self._listed.existing(existing)
        for rule in self._rules:
            reference = rule.reference
            if reference.partition not in known and not (listed or {}).get(reference.partition):
                yield rule, _ABSENT  # rows and owners share it: no row to keep or to delete
                continue
            rows = self._listed.rows(reference.partition, listed)
            yield rule, rule.find(rows)


@dataclass(frozen=True, slots=True)
class _Found:
    rows: int
    matched: int
    owned: list[str]  # keys whose owner exists


_ABSENT = _Found(rows=0, matched=0, owned=[])  # a partition the row store does not have


@dataclass(frozen=True, slots=True)
class _Rule:
    """One owner reference, compiled: how to find a row's owner key."""

    reference: OwnerReference
    owner_of: Callable[[str], str | None]

    @classmethod
    def of(cls, reference: OwnerReference) -> _Rule:
        template = KeyTemplate.parse(reference.owner.key)
        return cls(
            reference, _by_key(reference, compile_key_pattern(reference.key_pattern).fullmatch, template)
        )

    def find(self, rows: Mapping[str, Tags]) -> _Found:
        """The keys of `rows` whose owner is a key of `rows` too, and how many rows have an owner key."""
        owned: list[str] = []
        matched = 0
        counts = _counts_as_owner(self.reference.owner.has_tag)
        for key in rows:
            owner = self.owner_of(key)
            if owner is None:
                continue
            matched += 1
            if owner in rows and counts(rows[owner]):
                owned.append(key)
        return _Found(len(rows), matched, owned)


def _counts_as_owner(required_tag: str | None) -> Callable[[Tags | None], bool]:
    """Whether an owner row with these tags counts (owner.has_tag)."""
    if required_tag is None:
        return lambda _tags: True
    return lambda tags: bool(tags and tags.get(required_tag))


def _by_key(
    reference: OwnerReference, fullmatch: Callable[[str], re.Match[str] | None], template: KeyTemplate
) -> Callable[[str], str | None]:
    # `{uid}` alone, the common case: the group itself, without rendering (a sweep does this per row)
    whole = template.pieces[0][1] if len(template.pieces) == 1 and not template.pieces[0][0] else None

    def owner_of(key: str) -> str | None:
        match = fullmatch(key)
        if match is None:
            return None
        owner = match[whole] if whole is not None else template.render(match.groupdict())
        if owner is None:
            raise ReferenceSourceError(
                Source.OWNERS.value,
                f"row {reference.partition}/{key} matches key_pattern {reference.key_pattern!r} but leaves a "
                f"group of owner.key {reference.owner.key!r} unset: make the group required",
            )
        return owner

    return owner_of
