"""`tq-gc check`: validate config, reach every store and source, touch nothing."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from functools import partial
from itertools import islice
from typing import Any

from tq_gc.config import (
    Config,
    ManifestSource,
    OwnerReference,
    TagReference,
    longest_gap_seconds,
    schedule_problem,
)
from tq_gc.errors import CheckpointInProgress, ReferenceSourceError, TqGcError
from tq_gc.formats.keypath import split_key_path
from tq_gc.integrations import verl
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.references.emptied import baseline_age_ms, collected_yields, emptied_sources, refuse_emptied
from tq_gc.references.manifests import ManifestsSource, reader_of
from tq_gc.references.owners import OwnersSource
from tq_gc.references.tags import TagsSource
from tq_gc.report import meant_partition, missing_partition
from tq_gc.rows import KeysByPartition
from tq_gc.state import RedisState
from tq_gc.state.base import StateStore
from tq_gc.state.keys import CHECK_PROBE_NAMESPACE
from tq_gc.state.redis_namespaces import NamespaceSeen
from tq_gc.stores import RowStore
from tq_gc.stores.claims import describe_claim, state_address
from tq_gc.sweep.lease import default_holder
from tq_gc.wiring import Runtime

CheckResult = dict[str, Any]
# Rows with tags a tag key path is tried on: enough to tell a typo from a path some rows lack, and a
# check stays quick on a partition of a million rows.
KEY_PATH_SAMPLE_ROWS = 1000
# Other namespaces, and tag names of the sampled rows, named in a check's detail.
NAMESPACES_SHOWN = 10
TAG_NAMES_SHOWN = 20
# The probe admission and fence of `publisher rights`: taken back at once, gone by themselves if not.
PROBE_TTL_MS = 5_000


def _check(name: str, probe: Callable[[], str]) -> CheckResult:
    try:
        return {"name": name, "ok": True, "detail": probe()}
    except TqGcError as exc:
        return {"name": name, "ok": False, "detail": str(exc)}
    except Exception as exc:
        return {"name": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"}


def config_checks(config: Config, offline: bool = False) -> list[CheckResult]:
    """What the config alone says, reaching no store (`check --offline` stops here)."""
    scope = ", ".join(e.partition for e in config.scope) or "EMPTY: nothing would ever be collected"
    detail = f"namespace {config.namespace}; scope {scope}"
    if offline:
        detail += "; checked offline: no store, source or Ray reached"
    return [{"name": "config", "ok": bool(config.scope), "detail": detail}, _schedule_check(config)]


def _schedule_check(config: Config) -> CheckResult:
    """The sidecar's schedule must sweep twice per grace (a CronJob's own schedule too: a sweep warns when
    sweeps come further apart than the grace)."""
    problem = schedule_problem(config)
    if problem is not None:
        return {"name": "schedule", "ok": False, "detail": problem}
    gap_seconds, grace_seconds = longest_gap_seconds(config.schedule), config.grace_seconds
    detail = (
        f"the sidecar sweeps at most {gap_seconds:g} s apart, at least twice per grace "
        f"({grace_seconds:g} s); a CronJob must sweep at least every {grace_seconds / 2:g} s"
    )
    return {"name": "schedule", "ok": True, "detail": detail}


def run_checks(config: Config, runtime: Runtime) -> list[CheckResult]:
    """Every check, in order; the stores are opened for the checks and closed after (only those opened)."""
    results = config_checks(config)
    with runtime.stores(config) as (state, rows):
        assert rows is not None
        results.append(_check("state store", _probe_state(state, config)))
        if isinstance(state, RedisState):
            results.append(_eviction_check(state))
            results.append(_check("publisher rights", _probe_publisher_rights(config)))
            results.append(_check("namespace", _probe_namespaces(state, config)))
        results.append(
            _check("admissions", lambda: _count(AdmissionsSource(state, False).read(), "rows held"))
        )
        if config.owner_references:
            opened_here = runtime.state is None  # the CLI's own: with memory:// the sidecar's is elsewhere

            def protection() -> str:
                swept = verl.admissions_swept_by(config, state, opened_here, runtime.sidecar_name)
                return verl.protection(config, swept)

            results.append(_check("verl in-flight protection", protection))
        row_store = _check("row store", _probe_rows(config, rows))
        results.append(row_store)
        if row_store["ok"]:
            results += _scope_partition_checks(config, rows)
        holder = default_holder()
        claim = rows.claim(holder, state_address(config.state_url, holder)) if row_store["ok"] else None
        if claim is not None:  # the job's TQ: who may sweep it
            claimed = partial(describe_claim, config, claim, state, runtime.sidecar_name)
            results.append(_check("TransferQueue claim", claimed))
        said = rows.describe() if row_store["ok"] else {}
        # e.g. a TQ controller function that does not fit falls back to TQ's own calls: said, not failed
        results += [{"name": title, "ok": True, "detail": detail} for title, detail in said.items()]
        counted = tuple(source for source in config.manifests if not reader_of(source).checked_alone)
        results.append(_check("manifests", lambda: _count(ManifestsSource(counted).read(), "rows named")))
        results += [_manifest_check(source) for source in config.manifests if reader_of(source).checked_alone]
        if row_store["ok"]:
            tags = TagsSource(config.tag_references, rows)
            results.append(_check("tag references", lambda: _count(tags.read(), "rows named")))
            results += [
                _check(f"owner reference {reference.partition}", _probe_owners(reference, rows))
                for reference in config.owner_references
            ]
            results += [
                _check(
                    f"tag key path {reference.key_path} in {reference.partition}",
                    _probe_key_path(reference, rows),
                )
                for reference in config.tag_references
            ]
            results.append(_check("sources since the last sweep", _probe_emptied(config, state, rows)))
    return results


def _probe_key_path(reference: TagReference, rows: RowStore) -> Callable[[], str]:
    """Does the key path resolve in some rows of its partition that have tags? A typo resolves in none,
    reads as "references nothing", and leaves only the blast-radius guard before mass deletion."""

    def probe() -> str:
        listed = rows.list_rows(reference.partition) if reference.partition in rows.partitions() else None
        if listed is None:
            raise ReferenceSourceError(
                "tags", f"partition {reference.partition!r} does not exist in the row store"
            )
        sample = list(islice((tags for tags in listed.values() if tags), KEY_PATH_SAMPLE_ROWS))
        if not sample:
            return f"no row of {reference.partition!r} has tags yet: the key path cannot be checked"
        segments = split_key_path(reference.key_path)
        resolved = sum(1 for tags in sample if _reaches(tags, segments))
        if resolved:
            return f"{reference.key_path!r} resolves in {resolved} of {len(sample)} sampled rows with tags"
        names = sorted({name for tags in sample for name in tags})
        shown = ", ".join(names[:TAG_NAMES_SHOWN]) + (", ..." if len(names) > TAG_NAMES_SHOWN else "")
        raise ReferenceSourceError(
            "tags",
            f"key path {reference.key_path!r} resolves in none of the {len(sample)} sampled rows of "
            f"{reference.partition!r} that have tags (their tags: {shown}): a typo, or a field the job "
            "renamed? It names no row, so every row it should protect reads as unreferenced",
        )

    return probe


def _reaches(value: Any, segments: tuple[str, ...]) -> bool:
    """Whether the path reaches a value (of any type, a list included) in `value`, decoding JSON strings
    on the way as the tag reader does."""
    if isinstance(value, str) and segments:
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return False
    if not segments:
        return value is not None
    if isinstance(value, list | tuple):
        return any(_reaches(item, segments) for item in value)
    if isinstance(value, Mapping):
        return segments[0] in value and _reaches(value[segments[0]], segments[1:])
    return False


def _probe_namespaces(state: RedisState, config: Config) -> Callable[[], str]:
    """Publishers and sweepers on different namespaces or Redis databases each read as the other holding
    no references: flag a namespace that never saw an admission while others on this Redis did."""

    def probe() -> str:
        seen = state.namespaces_in_use()
        here = f"namespace {config.namespace!r} (db {state.database})"
        own = next((n for n in seen if (n.database, n.namespace) == (state.database, config.namespace)), None)
        others = [n for n in seen if n is not own]
        if own is not None and own.admitted:
            return f"{here}: admissions recorded; {len(others)} other tq-gc namespace(s) on this Redis"
        swept = own is not None and own.swept
        # Publishers nobody sweeps; before our first sweep, any namespace here may be the job's.
        suspects = [n for n in others if n.admitted and not n.swept] or ([] if swept else others)
        if not suspects:
            return f"{here}: no admission recorded yet; no other tq-gc namespace here looks like the job's"
        named = ", ".join(map(_describe_namespace, suspects[:NAMESPACES_SHOWN]))
        raise TqGcError(
            f"{here} has never recorded an admission{'' if swept else ' nor a sweep'}, while this Redis "
            f"holds {named}: are the publishers and this config on the same namespace and Redis database "
            "(the state_url's /<db>)? If the job has not started yet, check again once it has"
        )

    return probe


def _describe_namespace(seen: NamespaceSeen) -> str:
    admitted = "admissions" if seen.admitted else "no admissions"
    return f"{seen.namespace!r} (db {seen.database}, {admitted}, {'swept' if seen.swept else 'never swept'})"


def _probe_emptied(config: Config, state: StateStore, rows: RowStore) -> Callable[[], str]:
    """What the next sweep would refuse: a source that named rows at the last sweep, reading as empty now."""

    def probe() -> str:
        last = state.source_counts()
        rebuilding = _baseline_rebuilding(config, state)
        if not last:
            return "no sweep has recorded what its sources named yet" + rebuilding
        manifests = ManifestsSource(config.manifests)
        tags = TagsSource(config.tag_references, rows)
        owners = OwnersSource(config.owner_references, rows)
        try:
            manifests.read()
            tags.read()
            owners.read()
        except (ReferenceSourceError, CheckpointInProgress) as exc:
            return f"not compared: a source does not read now ({exc})"
        emptied = emptied_sources(last, collected_yields(manifests.yields(), tags.counts, owners.counts))
        refuse_emptied(config, last, emptied)
        named = sum(1 for count in last.values() if count)
        return (
            f"{named} source(s) named rows at the last sweep; none of those reads as empty now"
            + (f" (may become empty: {', '.join(emptied)})" if emptied else "")
            + rebuilding
        )

    return probe


def _baseline_rebuilding(config: Config, state: StateStore) -> str:
    """A note while the store's record of the sources is under a grace old (references/emptied.py)."""
    age_ms = baseline_age_ms(state, state.source_baseline_since_ms())
    if age_ms >= int(config.grace_seconds * 1000):
        return ""
    return (
        f"; that record is {age_ms / 1000:.0f} s old, under a grace ({config.grace_seconds:g} s): until it "
        "is a grace old, a source that reads as empty skips sweeps (baseline_rebuilding)"
    )


def _manifest_check(source: ManifestSource) -> CheckResult:
    """What one source of a format checked alone finds (a NeMo RL recovery glob: checkpoints, rows), or
    a checkpoint being written."""
    name = f"{source.format} {source.glob}"
    [summary] = ManifestsSource([source]).describe()
    if summary.in_progress:
        writing = ", ".join(summary.in_progress)
        detail = f"a checkpoint is being written ({writing}): sweeps skip until it is committed"
        return {"name": name, "ok": True, "detail": detail}
    if summary.error is not None:
        return {"name": name, "ok": False, "detail": summary.error}
    return {"name": name, "ok": True, "detail": reader_of(source).check_detail(source, summary)}


def _probe_owners(reference: OwnerReference, rows: RowStore) -> Callable[[], str]:
    def probe() -> str:
        if reference.partition not in rows.partitions():
            return (
                f"{reference.partition} not created yet: names nothing until the job writes it (its rows "
                "would be there too)"
            )
        [found] = OwnersSource([reference], rows).describe()
        return (
            f"{found.rows} rows in {found.partition}, {found.matched} with an owner key: {found.owned} owner "
            f"present (kept), {found.orphaned} owner absent (unreferenced)"
        )

    return probe


def _probe_state(state: StateStore, config: Config) -> Callable[[], str]:
    def probe() -> str:
        now_ms = state.now_ms()
        lease = state.lease_holder()
        holder = "free" if lease is None else f"held by {lease.holder}"
        return f"{config.redacted()['state_url']}: clock {now_ms} ms, lease {holder}"

    return probe


def _probe_publisher_rights(config: Config) -> Callable[[], str]:
    """What a publisher writes, under these credentials: an admission of no rows and a fence, each
    taken back at once, in the probe namespace (keys.CHECK_PROBE_NAMESPACE: the job's stays as its
    publishers left it). A store that refuses them would refuse the trainer kit (StoreRefused)."""

    def probe() -> str:
        probe_id = f"tq-gc-check-{secrets.token_hex(4)}"
        probe_state = RedisState.from_url(config.state_url, CHECK_PROBE_NAMESPACE)
        try:
            probe_state.admit(probe_id, {}, PROBE_TTL_MS)
            probe_state.release_admission(probe_id)
            probe_state.raise_fence(probe_id, PROBE_TTL_MS)
            probe_state.lower_fence(probe_id)
        finally:
            probe_state.close()
        return (
            "admit, release, fence and unfence allowed (publishers using these credentials may write; "
            f"tried in namespace {CHECK_PROBE_NAMESPACE!r}: an ACL limited to the job's own keys refuses "
            "it there)"
        )

    return probe


def _eviction_check(state: RedisState) -> CheckResult:
    """Redis evicting tq-gc's keys could drop the lease (two sweepers) or an admission's rows."""
    policy = state.eviction_policy()
    if policy is None:
        detail = "maxmemory-policy unknown (CONFIG GET refused): make sure it is noeviction"
        return {"name": "state store memory policy", "ok": True, "detail": detail}
    if policy != "noeviction":
        detail = (
            f"maxmemory-policy is {policy}: under memory pressure Redis may evict tq-gc's lease or "
            "admissions, or the write barrier (every sweep then stops before deleting). Set "
            "maxmemory-policy noeviction (or give tq-gc a Redis of its own)"
        )
        return {"name": "state store memory policy", "ok": False, "detail": detail}
    return {"name": "state store memory policy", "ok": True, "detail": "noeviction"}


def _probe_rows(config: Config, rows: RowStore) -> Callable[[], str]:
    listing = rows.list_keys  # keys are enough to count, cheaper

    def probe() -> str:
        existing = set(rows.partitions())
        sizes = ", ".join(
            f"{e.partition}: {len(listing(e.partition))} rows"
            if e.partition in existing
            else f"{e.partition}: not created yet"
            for e in config.scope
        )
        return sizes or "reachable"

    return probe


def _scope_partition_checks(config: Config, rows: RowStore) -> list[CheckResult]:
    """A scope partition the row store lacks is swept as empty. It fails the check when its name is close
    to an existing partition's (a typo would read as "0 rows, ok" forever); otherwise it reads as one the
    job has not written yet (verl's val before its first validation), and passes, said."""
    existing = set(rows.partitions())
    return [
        _missing_partition_check(entry.partition, existing)
        for entry in config.scope
        if entry.partition not in existing
    ]


def _missing_partition_check(partition: str, existing: set[str]) -> CheckResult:
    name = f"scope partition {partition}"
    if meant_partition(partition, existing) is not None:
        return {"name": name, "ok": False, "detail": missing_partition(partition, existing)}
    detail = (
        f"{partition} not created yet: swept once the job writes it, each sweep warning of it meanwhile "
        "(scope_partition_missing); a name that never appears is never swept"
    )
    return {"name": name, "ok": True, "detail": detail}


def _count(rows: KeysByPartition, what: str) -> str:
    return f"{sum(len(keys) for keys in rows.values())} {what}"
