"""The pure decision: from snapshots, what to delete and why every other in-scope row is kept.

    plan(observations, references, first_seen, now_ms, policy) -> Plan

No I/O and no clock of its own: the collector gathers the snapshots, the store's clock gives `now_ms`.
Every in-scope row lands in exactly one bucket (model.Decision); the property tests hold us to that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from tq_gc.config import Config, ScopeEntry
from tq_gc.model import KEEP_BY_SOURCE, Counts, Decision, FirstSeen, Identity, Observation, References, RowId


@dataclass(frozen=True)
class PlanPolicy:
    scope: tuple[ScopeEntry, ...]
    grace_ms: int
    max_deletes: int
    max_delete_fraction: float
    fraction_min_rows: int

    @classmethod
    def from_config(cls, config: Config, max_deletes: int | None = None) -> PlanPolicy:
        limits = config.limits
        cap = (
            limits.max_deletes_per_run
            if max_deletes is None
            else min(max_deletes, limits.max_deletes_per_run)
        )
        return cls(
            scope=config.scope,
            grace_ms=int(config.grace_seconds * 1000),
            max_deletes=cap,
            max_delete_fraction=limits.max_delete_fraction,
            fraction_min_rows=limits.fraction_min_rows,
        )

    def in_scope(self, row: RowId) -> bool:
        match = self._matchers.get(row.partition)
        return match is not None and (match is True or row.key.startswith(match))

    @cached_property
    def _matchers(self) -> dict[str, tuple[str, ...] | bool]:
        """partition -> True (all keys) or its prefixes: in_scope runs once per listed row."""
        return {entry.partition: True if entry.all_keys else entry.prefixes for entry in self.scope}


@dataclass(frozen=True, slots=True)
class Plan:
    decisions: Mapping[RowId, Decision]
    to_delete: tuple[RowId, ...]
    unreferenced_ms: Mapping[RowId, int]
    first_seen_upserts: Mapping[RowId, FirstSeen]
    first_seen_drops: frozenset[RowId]
    listed: int
    abort_reason: str | None = None
    tags_digests: Mapping[RowId, str] = field(default_factory=dict)

    def count(self, decision: Decision) -> int:
        return sum(1 for d in self.decisions.values() if d is decision)

    def counts(self) -> Counts:
        counts = Counts(listed=self.listed, in_scope=len(self.decisions))
        for source, decision in KEEP_BY_SOURCE.items():
            counts.referenced[source.value] = self.count(decision)
        counts.within_grace = self.count(Decision.KEEP_GRACE)
        counts.over_cap = self.count(Decision.KEEP_OVER_CAP)
        counts.eligible = self.count(Decision.DELETE) + counts.over_cap
        return counts


def plan(
    observations: Iterable[Observation],
    references: References,
    first_seen: Mapping[RowId, FirstSeen],
    now_ms: int,
    policy: PlanPolicy,
) -> Plan:
    decisions: dict[RowId, Decision] = {}
    digests: dict[RowId, str] = {}
    upserts: dict[RowId, FirstSeen] = {}
    ages: dict[RowId, int] = {}
    listed = 0
    for obs in observations:
        listed += 1
        if not policy.in_scope(obs.row):
            continue
        digests[obs.row] = obs.tags_digest
        source = references.source_of(obs.row)
        if source is not None:
            decisions[obs.row] = KEEP_BY_SOURCE[source]
            continue
        recorded = first_seen.get(obs.row)
        seen = _current_first_seen(recorded, obs, now_ms)
        ages[obs.row] = now_ms - seen.at_ms
        if seen is not recorded:
            # Never delete a row on first sight, whatever the grace: it must have been recorded
            # unreferenced by an earlier sweep (an unobserved owner is verified, never presumed gone).
            upserts[obs.row] = seen
            decisions[obs.row] = Decision.KEEP_GRACE
        else:
            decisions[obs.row] = Decision.DELETE if ages[obs.row] >= policy.grace_ms else Decision.KEEP_GRACE

    eligible = sorted(
        (row for row, d in decisions.items() if d is Decision.DELETE), key=lambda r: (-ages[r], r)
    )
    to_delete = eligible[: policy.max_deletes]
    for row in eligible[policy.max_deletes :]:
        decisions[row] = Decision.KEEP_OVER_CAP
    # A record is kept only while its row is in scope, listed and unreferenced: seeing the row
    # referenced again (or gone) restarts its clock from scratch next time.
    unreferenced = {row for row in ages}
    drops = frozenset(row for row in first_seen if row not in unreferenced)
    return Plan(
        decisions=decisions,
        to_delete=tuple(to_delete),
        unreferenced_ms={row: ages[row] for row in ages},
        first_seen_upserts=upserts,
        first_seen_drops=drops,
        listed=listed,
        abort_reason=_blast_radius(len(eligible), len(decisions), policy),
        tags_digests=digests,
    )


def _current_first_seen(recorded: FirstSeen | None, obs: Observation, now_ms: int) -> FirstSeen:
    """The record that holds now: the old one if the row is the same row, else a fresh one."""
    if recorded is not None and recorded.identity.tags_digest == obs.tags_digest and recorded.at_ms <= now_ms:
        return recorded
    return FirstSeen(at_ms=now_ms, identity=Identity(tags_digest=obs.tags_digest))


def _blast_radius(eligible: int, in_scope: int, policy: PlanPolicy) -> str | None:
    if eligible <= policy.fraction_min_rows or in_scope == 0:
        return None
    fraction = eligible / in_scope
    if fraction > policy.max_delete_fraction:
        return (
            f"blast radius: {eligible} of {in_scope} in-scope rows ({fraction:.0%}) are eligible, more than "
            f"limits.max_delete_fraction={policy.max_delete_fraction:g}; is a reference source missing "
            "rows? Check the sources, or raise the limit"
        )
    return None
