"""Sources that read as empty: a source that yielded references at the last sweep and reads as empty now
stops the sweep (fail closed) until the operator accepts it.

An unmounted volume leaves its mount point behind, an empty directory: a manifest glob then matches no
file, every read succeeds, and the rows its manifests protected are released. A renamed tag field does
the same to tag references. (Owner rules always accept being empty: their owners come from the same
listing as their rows, config.sources.OwnerReference.) Nothing else tells these apart from
a job that really released everything, so the state store remembers how many references each source
yielded at the last sweep that read every source, and a source that yielded some then and reads as
empty now aborts the sweep (cause source_failed, exit 4), naming the source, what to check, and how to
accept it: `tq-gc sweep --accept-empty SOURCE` for one sweep (which then records it empty), or
`when_empty: accept` on the source for good.

What reads as empty: a manifest source whose glob matches no file at all (files that are retired or name no
rows are the publisher saying "release", and are believed); a tag or owner reference that names no row (an
owner rule's is recorded, and always accepted). The base directory's device (st_dev) is reported, not
compared: a CronJob's pod mounts the volume afresh every run, and the device number of the same volume can
differ from one mount to the next (another node, another attach order), so a change alone proves nothing; no
file where files were is what an unmounted volume looks like.

A Redis restarted empty loses that baseline with everything else, and may come back just as a volume
went missing. A sweeper that recorded a baseline in this process (the sidecar) keeps its own copy, and
when the store has none any more, its copy stands in: the unmounted volume still stops the sweep. A
sweeper with no copy (a CronJob's fresh process) cannot tell, so a store's baseline is trusted to say a
source became empty only once it is a grace old (the store records when it began): until then a source
that reads as empty (and is neither `when_empty: accept` nor accepted) skips the sweep (cause
baseline_rebuilding, exit 3) before any first-seen record moves, so nothing becomes eligible on its
word. The sweep still records what the sources named, which is how the baseline ages. The cost: a new
job, whose manifests are empty at first, skips for its first grace, while nothing could be eligible
anyway (its first-seen records are empty too).

Admissions are not guarded so: every admission released is a job between calls. Publishers on another
namespace or Redis database than the sweeper's are what `tq-gc check` looks for instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tq_gc.config import Config, ManifestSource, OwnerReference, TagReference
from tq_gc.errors import BaselineRebuilding, ConfigError, ReferenceSourceError
from tq_gc.references.globwalk import enclosing_mount
from tq_gc.state.base import Lease, StateStore

log = logging.getLogger(__name__)

ConfiguredSource = ManifestSource | TagReference | OwnerReference


@dataclass(frozen=True, slots=True)
class Yield:
    """What one source yielded in a sweep: how many references, and whether it read as empty."""

    references: int
    reads_as_empty: bool

    def merged(self, other: Yield) -> Yield:
        """Two reads of one sweep: empty only if both were, as many references as the larger."""
        return Yield(max(self.references, other.references), self.reads_as_empty and other.reads_as_empty)

    @classmethod
    def counted(cls, references: int) -> Yield:
        return cls(references, references == 0)


def collected_yields(
    manifests: Mapping[str, Yield], tags: Mapping[str, int], owners: Mapping[str, int]
) -> dict[str, Yield]:
    """{source_id: Yield} of every source a sweep read: the manifests' own, and the tag and owner
    references' counts (such a reference reads as empty when it names no row)."""
    counted = {source_id: Yield.counted(count) for source_id, count in {**tags, **owners}.items()}
    return {**manifests, **counted}


def configured_sources(config: Config) -> dict[str, ConfiguredSource]:
    """{source_id: entry} of every manifest, tag and owner reference the config names."""
    entries: list[ConfiguredSource] = [*config.manifests, *config.tag_references, *config.owner_references]
    return {entry.source_id: entry for entry in entries}


def accepted_sources(config: Config, accept_empty: Collection[str]) -> frozenset[str]:
    """The source ids an operator accepts as empty for one sweep; ConfigError naming one that the config
    does not have (a typo there would accept nothing, silently)."""
    known = configured_sources(config)
    unknown = [source_id for source_id in accept_empty if source_id not in known]
    if unknown:
        listed = ", ".join(repr(source_id) for source_id in known) or "none"
        raise ConfigError(
            f"--accept-empty {unknown[0]!r} is not a configured reference source (the sources: {listed})"
        )
    return frozenset(accept_empty)


def guard_emptied_sources(
    state: StateStore,
    lease: Lease,
    config: Config,
    accepted: Collection[str],
    yields: Mapping[str, Yield],
    remembered: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Abort (ReferenceSourceError) if a source that yielded references at the last recorded sweep reads
    as empty now, unless it may become empty or is accepted; else record what every source yielded now,
    and return it. `remembered`: what this sweeper recorded last, standing in for the store's record
    when the store has none any more (restarted empty). Then BaselineRebuilding if a source reads as
    empty while the store's baseline is younger than a grace."""
    since_ms = state.source_baseline_since_ms()
    last = baseline(state, remembered, since_ms)
    emptied = emptied_sources(last, yields)
    refuse_emptied(config, last, [source_id for source_id in emptied if source_id not in accepted])
    for source_id in emptied:
        count = last[source_id]
        log.warning(
            "reference source %r named %d rows at the last sweep and none now: accepted", source_id, count
        )
    counts = {source_id: found.references for source_id, found in yields.items()}
    state.record_source_counts(lease, counts)
    refuse_untrusted_empty(state, config, accepted, yields, since_ms)
    return counts


def baseline(
    state: StateStore, remembered: Mapping[str, int] | None, since_ms: int | None
) -> Mapping[str, int]:
    """What the sources yielded at the last sweep that read them all: the store's record, or this
    sweeper's own copy when the store has lost its record (no baseline at all, `since_ms` None:
    restarted empty)."""
    if remembered and since_ms is None:
        log.warning(
            "the state store has lost its record of what the reference sources named (restarted empty?): "
            "this sweeper's own record of its last sweep stands in"
        )
        return remembered
    return state.source_counts()


def refuse_untrusted_empty(
    state: StateStore,
    config: Config,
    accepted: Collection[str],
    yields: Mapping[str, Yield],
    since_ms: int | None,
) -> None:
    """BaselineRebuilding if a source reads as empty, is neither accepted nor `when_empty: accept`, and the
    store's baseline (begun at `since_ms`, None: begun by this sweep) is younger than a grace."""
    age_ms = baseline_age_ms(state, since_ms)
    if age_ms >= int(config.grace_seconds * 1000):
        return
    configured = configured_sources(config)
    untrusted = [
        source_id
        for source_id, found in yields.items()
        if found.reads_as_empty
        and source_id not in accepted
        and not (source_id in configured and configured[source_id].may_become_empty)
    ]
    if untrusted:
        raise BaselineRebuilding(untrusted, age_ms / 1000, config.grace_seconds)


def baseline_age_ms(state: StateStore, since_ms: int | None) -> int:
    """How old the store's source baseline is on its clock: 0 when it has none (begun by this sweep)."""
    return 0 if since_ms is None else max(0, state.now_ms() - since_ms)


def emptied_sources(last: Mapping[str, int], yields: Mapping[str, Yield]) -> list[str]:
    """The sources that named rows at the last recorded sweep and read as empty now."""
    return [
        source_id
        for source_id, found in yields.items()
        if found.reads_as_empty and last.get(source_id, 0) > 0
    ]


def refuse_emptied(config: Config, last: Mapping[str, int], emptied: Collection[str]) -> None:
    """ReferenceSourceError explaining the first of `emptied` that may not become empty, if any."""
    configured = configured_sources(config)
    refused = [
        source_id
        for source_id in emptied
        if source_id in configured and not configured[source_id].may_become_empty
    ]
    if refused:
        first, *others = refused
        also = f" Empty too, for the same reasons to check: {', '.join(map(repr, others))}." if others else ""
        raise ReferenceSourceError(first, _explain(configured[first], last[first]) + also)


def _explain(source: ConfiguredSource, last_count: int) -> str:
    rows = f"{last_count} row" + ("" if last_count == 1 else "s")
    return (
        f"it named {rows} at the last sweep that read every source {_what_to_check(source)}. Nothing is "
        "deleted while it reads as empty. If it is empty on purpose, accept it for one sweep with "
        f"`tq-gc sweep --accept-empty '{source.source_id}'`, or set `when_empty: accept` on the source."
    )


def _what_to_check(source: ConfiguredSource) -> str:
    if isinstance(source, ManifestSource):
        return f"and now matches no file: {_volume(source)}"
    if isinstance(source, TagReference):
        return (
            f"and names none now: do the rows of {source.partition!r} still carry {source.key_path!r} (a "
            "renamed field?), and is this the job's TransferQueue?"
        )
    return "and names none now"  # an owner rule's never gets here: those always accept being empty


def _volume(source: ManifestSource) -> str:
    base = source.base
    try:
        device = f", device {os.stat(base).st_dev:#x}"
    except OSError:
        device = ""
    hint = "" if source.marker else " (a `marker` on the source makes tq-gc check it)"
    return (
        f"is the volume mounted? Its base directory {base} is on the file system mounted at "
        f"{enclosing_mount(base)}{device}{hint}"
    )
