"""Owner references: a row is referenced while its owner row exists (Kubernetes' ownerReferences).

verl keeps one prompt row per group, keyed `{uid}`, beside the group's trajectory rows keyed
`{uid}_{session_id}_{index}`, until its replay buffer samples the group: then the prompt row goes at
once and the trajectories stay in the trainer's hands for the whole step, held by the trainer
integration's admissions (tq_gc.integrations.verl), not by this rule. With

    owner_references:
      - partition: train
        key_pattern: '^(?P<uid>[^_]+)_[^_]+_\\d+$'
        owner_key: '{uid}'
        owner_has_tag: is_prompt

a trajectory is referenced while `train` holds the row `{uid}` tagged is_prompt. The owner's key comes
from the row's key (a pattern the whole key must match, whose named groups fill the `owner_key` template)
or from a tag (`owner_tag`: the tag's value is the owner's key); `owner_has_tag` makes an owner row count
only while that tag is true on it. A row the pattern does not match, or without the tag, is left to the
other rules; a row whose owner is absent is unreferenced, and its grace runs as always.

Owners are looked up in the sweep's own listing of the owner partition (one snapshot, read in the
tags' slot: see sweep.observe.Observer.read). Fails closed: a partition the row store lacks
(owned or owner), an owner tag that is not a key string, a match that leaves a group of the template
unset, and a reference with `when_empty: abort` whose pattern matches no row of a non-empty partition
all fail the source. A reference marked `created_by_stack` (its rows and owners in one partition, which
the stack creates on its first write) names nothing while that partition does not exist.
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
    owner_partition: str
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
        """The partitions this source reads (owned and owner ones): a collector that lists them anyway
        can pass its listing."""
        named = [(rule.reference.partition, rule.reference.owners_in) for rule in self._rules]
        return list(dict.fromkeys(partition for pair in named for partition in pair))

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
            OwnerSummary(
                rule.reference.partition,
                rule.reference.owners_in,
                found.rows,
                found.matched,
                len(found.owned),
            )
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
            if reference.created_by_stack and reference.partition not in known:
                yield rule, _NOT_CREATED  # rows and owners share it (config): no row to keep or delete
                continue
            for role, partition in (
                ("partition", reference.partition),
                ("owner_partition", reference.owners_in),
            ):
                if partition not in known:
                    raise ReferenceSourceError(
                        Source.OWNERS.value,
                        f"partition {partition!r} (owner_references {role}) does not exist in the row "
                        "store: a typo, a renamed partition, or a job that has not written it yet (mark "
                        "the entry created_by_stack: true if the stack creates it later). Nothing is "
                        "deleted until it exists",
                    )
            rows = self._listed.rows(reference.partition, listed)
            owners = self._listed.rows(reference.owners_in, listed)
            yield rule, rule.find(rows, owners)


@dataclass(frozen=True, slots=True)
class _Found:
    rows: int
    matched: int
    owned: list[str]  # keys whose owner exists


_NOT_CREATED = _Found(rows=0, matched=0, owned=[])  # a created_by_stack partition the stack has not written


@dataclass(frozen=True, slots=True)
class _Rule:
    """One owner reference, compiled: how to find a row's owner key."""

    reference: OwnerReference
    owner_of: Callable[[str, Tags | None], str | None]

    @classmethod
    def of(cls, reference: OwnerReference) -> _Rule:
        if reference.owner_tag is not None:
            return cls(reference, _by_tag(reference, reference.owner_tag))
        assert reference.key_pattern is not None and reference.owner_key is not None, "config validated"
        template = KeyTemplate.parse(reference.owner_key)
        return cls(
            reference, _by_key(reference, compile_key_pattern(reference.key_pattern).fullmatch, template)
        )

    def find(self, rows: Mapping[str, Tags], owners: Mapping[str, Tags]) -> _Found:
        """The keys of `rows` whose owner is a key of `owners`, and how many rows have an owner key."""
        owned: list[str] = []
        matched = 0
        counts = _counts_as_owner(self.reference.owner_has_tag)
        for key, tags in rows.items():
            owner = self.owner_of(key, tags)
            if owner is None:
                continue
            matched += 1
            if owner in owners and counts(owners[owner]):
                owned.append(key)
        if self.reference.expect_nonempty and rows and not matched:
            raise ReferenceSourceError(
                Source.OWNERS.value,
                f"{_describe(self.reference)} matches none of the {len(rows)} rows of partition "
                f"{self.reference.partition!r}, but the reference has when_empty: abort: check the pattern "
                "against the job's keys",
            )
        return _Found(len(rows), matched, owned)


def _counts_as_owner(required_tag: str | None) -> Callable[[Tags | None], bool]:
    """Whether an owner row with these tags counts (owner_has_tag)."""
    if required_tag is None:
        return lambda _tags: True
    return lambda tags: bool(tags and tags.get(required_tag))


def _by_key(
    reference: OwnerReference, fullmatch: Callable[[str], re.Match[str] | None], template: KeyTemplate
) -> Callable[[str, Tags | None], str | None]:
    # `{uid}` alone, the common case: the group itself, without rendering (a sweep does this per row)
    whole = template.pieces[0][1] if len(template.pieces) == 1 and not template.pieces[0][0] else None

    def owner_of(key: str, _tags: Tags | None) -> str | None:
        match = fullmatch(key)
        if match is None:
            return None
        owner = match[whole] if whole is not None else template.render(match.groupdict())
        if owner is None:
            raise ReferenceSourceError(
                Source.OWNERS.value,
                f"row {reference.partition}/{key} matches key_pattern {reference.key_pattern!r} but leaves a "
                f"group of owner_key {reference.owner_key!r} unset: make the group required",
            )
        return owner

    return owner_of


def _by_tag(reference: OwnerReference, tag: str) -> Callable[[str, Tags | None], str | None]:
    def owner_of(key: str, tags: Tags | None) -> str | None:
        owner = tags.get(tag) if tags else None
        if owner is None or isinstance(owner, str):
            return owner
        raise ReferenceSourceError(
            Source.OWNERS.value,
            f"row {reference.partition}/{key}: tag {tag!r} is {type(owner).__name__} {owner!r}, not the "
            "owner's key (a string)",
        )

    return owner_of


def _describe(reference: OwnerReference) -> str:
    if reference.owner_tag is not None:
        return f"owner_tag {reference.owner_tag!r}"
    return f"key_pattern {reference.key_pattern!r}"
