"""The planner: parametrized tables for each rule, and hypothesis properties over random snapshots."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tq_gc.config import ScopeEntry
from tq_gc.decisions import Decision
from tq_gc.first_seen import FirstSeen
from tq_gc.plan import PlanPolicy, admitted_meanwhile, plan, stale_partitions
from tq_gc.referenced import References
from tq_gc.rows import Identity, RowId, group_by_partition, merge_keys, tags_digest

STAGING = "rollout_staging"
DATA = "rollout_data"
GRACE_MS = 60_000
NOW = 10_000_000
ROW = RowId(STAGING, "r1/c1")


def policy(**overrides: Any) -> PlanPolicy:
    values: dict[str, Any] = {
        "scope": (ScopeEntry(partition=STAGING, prefixes=("__generation_cut__/", "r")),),
        "grace_ms": GRACE_MS,
        "max_deletes": 1000,
        "max_delete_fraction": 1.0,
        "fraction_min_rows": 0,
    }
    values.update(overrides)
    return PlanPolicy(**values)


def listing(*keys: str, partition: str = STAGING) -> dict[str, dict[str, dict[str, Any]]]:
    return {partition: {key: {"rollout_id": key.split("/")[0]} for key in keys}}


def seen(at_ms: int, key: str = "r1/c1") -> dict[str, dict[str, FirstSeen]]:
    return {STAGING: {key: FirstSeen(at_ms, Identity("any"))}}


def test_unreferenced_row_first_seen_now_is_kept_within_grace() -> None:
    result = plan(listing("r1/c1"), References(), {}, NOW, policy())
    assert result.decision_of(ROW) is Decision.KEEP_GRACE and result.counts().in_scope == 1
    record = result.first_seen_upserts[STAGING]["r1/c1"]
    assert record.at_ms == NOW and record.identity.tags_digest == tags_digest({"rollout_id": "r1"})
    assert result.to_delete == {}


@pytest.mark.parametrize("grace_ms", [0, 1, GRACE_MS])
def test_never_deleted_on_first_sight_whatever_the_grace(grace_ms: int) -> None:
    result = plan(listing("r1/c1"), References(), {}, NOW, policy(grace_ms=grace_ms))
    assert result.to_delete == {}


@pytest.mark.parametrize(
    ("first_seen_ms", "decision"),
    [
        (NOW - GRACE_MS, Decision.DELETE),
        (NOW - GRACE_MS - 5_000, Decision.DELETE),
        (NOW - GRACE_MS + 1, Decision.KEEP_GRACE),
        (NOW, Decision.KEEP_GRACE),
    ],
)
def test_grace_boundary(first_seen_ms: int, decision: Decision) -> None:
    result = plan(listing("r1/c1"), References(), seen(first_seen_ms), NOW, policy())
    assert result.decision_of(ROW) is decision
    if decision is Decision.DELETE:
        assert result.rows_to_delete() == [ROW] and result.now_ms == NOW
        assert result.first_seen_upserts == {}


@pytest.mark.parametrize(
    ("refs", "decision"),
    [
        (References.from_rows(admissions=[ROW]), Decision.KEEP_ADMISSION),
        (References.from_rows(manifests=[ROW]), Decision.KEEP_MANIFEST),
        (References.from_rows(tags=[ROW]), Decision.KEEP_TAG),
        (References.from_rows([ROW], [ROW], [ROW]), Decision.KEEP_ADMISSION),
        (References.from_rows(manifests=[ROW], tags=[ROW]), Decision.KEEP_MANIFEST),
    ],
)
def test_referenced_rows_are_kept_by_the_first_source_and_drop_their_clock(
    refs: References, decision: Decision
) -> None:
    result = plan(listing("r1/c1"), refs, seen(0), NOW, policy())
    assert result.decision_of(ROW) is decision
    assert result.first_seen_drops == {STAGING: frozenset({"r1/c1"})}


def test_gone_rows_drop_their_clock() -> None:
    result = plan(listing(), References(), seen(0, "r9/c9"), NOW, policy())
    assert result.first_seen_drops == {STAGING: frozenset({"r9/c9"})}


def test_out_of_scope_rows_are_not_planned() -> None:
    rows = {**listing("x/1"), **listing("r1/c1", partition=DATA)}
    result = plan(rows, References(), {}, NOW, policy())
    assert result.counts().in_scope == 0 and result.listed == 2 and result.first_seen_upserts == {}


def test_a_record_from_the_future_restarts_the_clock() -> None:
    result = plan(listing("r1/c1"), References(), seen(NOW + 5), NOW, policy())
    assert result.decision_of(ROW) is Decision.KEEP_GRACE
    assert result.first_seen_upserts[STAGING]["r1/c1"].at_ms == NOW


def test_cap_deletes_the_oldest_and_keeps_the_rest() -> None:
    keys = [f"r{i}/c" for i in range(5)]
    first_seen = {
        STAGING: {key: FirstSeen(NOW - GRACE_MS - i * 1000, Identity("d")) for i, key in enumerate(keys)}
    }
    result = plan(listing(*keys), References(), first_seen, NOW, policy(max_deletes=2))
    assert result.rows_to_delete() == [RowId(STAGING, "r4/c"), RowId(STAGING, "r3/c")]
    assert result.count(Decision.KEEP_OVER_CAP) == 3 and result.counts().eligible == 5


def test_equal_ages_delete_in_row_order() -> None:
    keys = ["r3/c", "r1/c", "r2/c"]
    first_seen = {STAGING: {key: FirstSeen(0, Identity("d")) for key in keys}}
    result = plan(listing(*keys), References(), first_seen, NOW, policy())
    assert [row.key for row in result.rows_to_delete()] == ["r1/c", "r2/c", "r3/c"]


@pytest.mark.parametrize(("floor", "aborts"), [(0, True), (5, True), (6, False)])
def test_blast_radius(floor: int, aborts: bool) -> None:
    keys = [f"r{i}/c" for i in range(10)]
    first_seen = {STAGING: {key: FirstSeen(0, Identity("d")) for key in keys[:6]}}
    result = plan(
        listing(*keys),
        References(),
        first_seen,
        NOW,
        policy(max_delete_fraction=0.5, fraction_min_rows=floor),
    )
    assert (result.abort_reason is not None) is aborts
    if aborts:
        assert "6 of 10" in (result.abort_reason or "")


# ---------------------------------------------------------------------------- properties

KEYS = st.sampled_from(
    [f"r{i}/c{j}" for i in range(4) for j in range(3)] + ["__generation_cut__/k/r/c/0", "x"]
)
ROWS = st.builds(RowId, st.sampled_from([STAGING, DATA]), KEYS)
ROW_SETS = st.frozensets(ROWS, max_size=12)
Snapshot = tuple[dict[str, dict[str, Any]], References, dict[str, dict[str, FirstSeen]], int, PlanPolicy]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    listed: dict[str, dict[str, Any]] = {}
    for row in draw(ROW_SETS):
        listed.setdefault(row.partition, {})[row.key] = {"v": draw(st.integers(0, 1))}
    refs = References.from_rows(draw(ROW_SETS), draw(ROW_SETS), draw(ROW_SETS))
    first_seen: dict[str, dict[str, FirstSeen]] = {}
    for row in draw(ROW_SETS):
        first_seen.setdefault(row.partition, {})[row.key] = FirstSeen(
            draw(st.integers(0, NOW + 1000)), Identity("d")
        )
    pol = policy(
        grace_ms=draw(st.integers(0, NOW)),
        max_deletes=draw(st.integers(0, 20)),
        max_delete_fraction=draw(st.floats(0.01, 1.0)),
    )
    return listed, refs, first_seen, draw(st.integers(NOW - 100, NOW + 100)), pol


def _scoped(row: RowId) -> bool:
    """The oracle for `policy()`'s scope, written out rather than asked of the planner."""
    return row.partition == STAGING and (row.key.startswith("__generation_cut__/") or row.key[:1] == "r")


def _in_scope(snap: Snapshot) -> set[RowId]:
    listed = snap[0]
    return {RowId(p, k) for p, keys in listed.items() for k in keys if _scoped(RowId(p, k))}


def _past_grace(record: FirstSeen, now: int, pol: PlanPolicy) -> bool:
    return now - record.at_ms >= 0 and now - record.at_ms >= pol.grace_ms


@given(snapshots())
def test_no_referenced_young_unseen_or_out_of_scope_row_is_deleted(snap: Snapshot) -> None:
    _, refs, first_seen, now, pol = snap
    result, referenced = plan(*snap), refs.rows()
    for row in result.rows_to_delete():
        assert row not in referenced
        assert _scoped(row)
        record = first_seen[row.partition][row.key]  # KeyError = deleted on first sight
        assert _past_grace(record, now, pol)
    assert len(result.rows_to_delete()) <= pol.max_deletes


@given(snapshots())
def test_buckets_partition_the_in_scope_rows(snap: Snapshot) -> None:
    result = plan(*snap)
    buckets = [result.rows(decision) for decision in Decision]
    assert set().union(*buckets) == _in_scope(snap)
    assert sum(len(b) for b in buckets) == len(_in_scope(snap)), "a row in two buckets"
    assert result.rows(Decision.DELETE) == set(result.rows_to_delete())
    counts = result.counts()
    assert sum(counts.referenced.values()) + counts.within_grace + counts.eligible == counts.in_scope


@given(snapshots())
def test_every_old_unreferenced_row_is_deleted_or_capped(snap: Snapshot) -> None:
    _, refs, first_seen, now, pol = snap
    result, referenced = plan(*snap), refs.rows()
    for row in _in_scope(snap) - referenced:
        record = first_seen.get(row.partition, {}).get(row.key)
        if record is not None and _past_grace(record, now, pol):
            assert result.decision_of(row) in (Decision.DELETE, Decision.KEEP_OVER_CAP)


STAGING_2 = "rollout_staging_2"


@st.composite
def capped_snapshots(draw: st.DrawFn) -> Snapshot:
    """Every listed row unreferenced and past its grace, in two swept partitions, first seen at a few
    times (sweeps see rows in batches: ages tie often), and a cap that usually bites."""
    rows = draw(st.frozensets(st.builds(RowId, st.sampled_from([STAGING, STAGING_2]), KEYS), min_size=1))
    listed: dict[str, dict[str, Any]] = {}
    first_seen: dict[str, dict[str, FirstSeen]] = {}
    for row in rows:
        listed.setdefault(row.partition, {})[row.key] = {}
        first_seen.setdefault(row.partition, {})[row.key] = FirstSeen(
            draw(st.sampled_from([0, 1, 2])), Identity("d")
        )
    scope = tuple(
        ScopeEntry(partition=p, prefixes=("__generation_cut__/", "r")) for p in (STAGING, STAGING_2)
    )
    pol = policy(scope=scope, grace_ms=0, max_deletes=draw(st.integers(0, len(rows))))
    return listed, References(), first_seen, NOW, pol


@given(capped_snapshots())
def test_past_the_cap_the_longest_unreferenced_go_first_ties_in_partition_then_row_order(
    snap: Snapshot,
) -> None:
    listed, _, first_seen, _, pol = snap
    result = plan(*snap)
    eligible = result.rows(Decision.DELETE) | result.rows(Decision.KEEP_OVER_CAP)
    in_scope = {RowId(p, k) for p, keys in listed.items() for k in keys if k != "x"}  # "x": not in scope
    assert eligible == in_scope
    if len(eligible) <= pol.max_deletes:
        expected = sorted(eligible)
    else:
        oldest = sorted(eligible, key=lambda r: (first_seen[r.partition][r.key].at_ms, r.partition, r.key))
        expected = sorted(oldest[: pol.max_deletes], key=lambda row: row.partition)  # stable: age order kept
    assert result.rows_to_delete() == expected
    assert result.rows(Decision.DELETE) == set(expected)
    assert result.rows(Decision.KEEP_OVER_CAP) == eligible - set(expected)


@given(snapshots())
def test_first_seen_records_stay_only_for_unreferenced_in_scope_rows(snap: Snapshot) -> None:
    _, refs, first_seen, _, _ = snap
    result, referenced = plan(*snap), refs.rows()
    after = {
        RowId(p, k)
        for p in set(first_seen) | set(result.first_seen_upserts)
        for k in (set(first_seen.get(p, {})) - result.first_seen_drops.get(p, frozenset()))
        | set(result.first_seen_upserts.get(p, {}))
    }
    assert after == _in_scope(snap) - referenced


@given(
    observed=st.dictionaries(
        st.sampled_from([STAGING, DATA, "old"]), st.integers(NOW - 3 * GRACE_MS, NOW + 10)
    ),
    scope=st.frozensets(st.sampled_from([STAGING, DATA, "new"])),
    started=st.integers(NOW - 10, NOW + 10),
)
def test_records_are_trusted_only_while_observed_within_grace(
    observed: dict[str, int], scope: frozenset[str], started: int
) -> None:
    stale = stale_partitions(observed, scope, started, GRACE_MS)
    for partition in scope | set(observed):
        last = observed.get(partition)
        trusted = partition in scope and last is not None and last <= started <= last + GRACE_MS
        assert (partition not in stale) is trusted, (partition, last)


@given(snapshots(), ROW_SETS)
def test_rows_admitted_meanwhile_are_kept_as_if_the_snapshot_had_shown_them(
    snap: Snapshot, admitted_rows: frozenset[RowId]
) -> None:
    listed, refs, first_seen, now, pol = snap
    admitted = group_by_partition(admitted_rows)
    result = admitted_meanwhile(plan(*snap), admitted)
    before = plan(*snap)

    buckets = [result.rows(decision) for decision in Decision]
    assert set().union(*buckets) == _in_scope(snap)
    assert sum(len(b) for b in buckets) == len(_in_scope(snap)), "a row in two buckets"
    assert result.rows(Decision.DELETE) == set(result.rows_to_delete())
    assert set(result.rows_to_delete()) <= set(before.rows_to_delete()) - admitted_rows
    records = {
        RowId(p, k)
        for p in set(first_seen) | set(result.first_seen_upserts)
        for k in (set(first_seen.get(p, {})) - result.first_seen_drops.get(p, frozenset()))
        | set(result.first_seen_upserts.get(p, {}))
    }
    assert records == _in_scope(snap) - refs.rows() - admitted_rows
    if len(before.rows(Decision.KEEP_OVER_CAP)) == 0:  # the cap did not bite: the plan that saw them
        shown = References(
            admissions=merge_keys(refs.admissions, admitted), manifests=refs.manifests, tags=refs.tags
        )
        full = plan(listed, shown, first_seen, now, pol)
        for decision in (Decision.DELETE, Decision.KEEP_GRACE, Decision.KEEP_OVER_CAP):
            assert result.rows(decision) == full.rows(decision), decision
