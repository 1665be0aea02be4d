"""The planner: parametrized tables for each rule, and hypothesis properties over random snapshots."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tq_gc.config import ScopeEntry
from tq_gc.model import Decision, FirstSeen, Identity, Observation, References, RowId
from tq_gc.plan import PlanPolicy, plan

STAGING = "rollout_staging"
GRACE_MS = 60_000
NOW = 10_000_000


def policy(**overrides: object) -> PlanPolicy:
    values: dict[str, object] = {
        "scope": (ScopeEntry(partition=STAGING, prefixes=("__generation_cut__/", "r")),),
        "grace_ms": GRACE_MS,
        "max_deletes": 1000,
        "max_delete_fraction": 1.0,
        "fraction_min_rows": 0,
    }
    values.update(overrides)
    return PlanPolicy(**values)  # type: ignore[arg-type]


def obs(key: str, partition: str = STAGING, digest: str = "d") -> Observation:
    return Observation(RowId(partition, key), digest)


def seen(at_ms: int, digest: str = "d") -> FirstSeen:
    return FirstSeen(at_ms, Identity(digest))


def test_unreferenced_row_first_seen_now_is_kept_within_grace() -> None:
    result = plan([obs("r1/c1")], References(), {}, NOW, policy())
    assert result.decisions == {RowId(STAGING, "r1/c1"): Decision.KEEP_GRACE}
    assert result.first_seen_upserts[RowId(STAGING, "r1/c1")].at_ms == NOW
    assert result.to_delete == ()


def test_row_unreferenced_for_grace_is_deleted() -> None:
    row = RowId(STAGING, "r1/c1")
    result = plan([obs("r1/c1")], References(), {row: seen(NOW - GRACE_MS)}, NOW, policy())
    assert result.to_delete == (row,)
    assert result.unreferenced_ms[row] == GRACE_MS
    assert result.first_seen_upserts == {}


def test_row_one_ms_short_of_grace_is_kept() -> None:
    row = RowId(STAGING, "r1/c1")
    result = plan([obs("r1/c1")], References(), {row: seen(NOW - GRACE_MS + 1)}, NOW, policy())
    assert result.decisions[row] is Decision.KEEP_GRACE


def test_referenced_row_drops_its_clock() -> None:
    row = RowId(STAGING, "r1/c1")
    result = plan([obs("r1/c1")], References(manifests=frozenset({row})), {row: seen(0)}, NOW, policy())
    assert result.decisions[row] is Decision.KEEP_MANIFEST
    assert row in result.first_seen_drops


def test_changed_tags_restart_the_clock() -> None:
    row = RowId(STAGING, "r1/c1")
    result = plan([obs("r1/c1", digest="new")], References(), {row: seen(0, "old")}, NOW, policy())
    assert result.decisions[row] is Decision.KEEP_GRACE
    assert result.first_seen_upserts[row] == FirstSeen(NOW, Identity("new"))


def test_gone_rows_drop_their_clock() -> None:
    gone = RowId(STAGING, "r9/c9")
    result = plan([], References(), {gone: seen(0)}, NOW, policy())
    assert result.first_seen_drops == {gone}


def test_out_of_scope_rows_are_not_planned() -> None:
    rows = [obs("x/1"), obs("r1/c1", partition="rollout_data")]
    result = plan(rows, References(), {}, NOW, policy())
    assert result.decisions == {}
    assert result.listed == 2


def test_source_precedence_admissions_then_manifests_then_tags() -> None:
    row = RowId(STAGING, "r1/c1")
    refs = References(admissions=frozenset({row}), manifests=frozenset({row}), tags=frozenset({row}))
    assert plan([obs("r1/c1")], refs, {}, NOW, policy()).decisions[row] is Decision.KEEP_ADMISSION


def test_cap_keeps_the_youngest_eligible_rows() -> None:
    rows = [obs(f"r{i}/c") for i in range(5)]
    first_seen = {RowId(STAGING, f"r{i}/c"): seen(NOW - GRACE_MS - i * 1000) for i in range(5)}
    result = plan(rows, References(), first_seen, NOW, policy(max_deletes=2))
    assert result.to_delete == (RowId(STAGING, "r4/c"), RowId(STAGING, "r3/c"))
    assert result.count(Decision.KEEP_OVER_CAP) == 3


def test_blast_radius_aborts_above_the_fraction() -> None:
    rows = [obs(f"r{i}/c") for i in range(10)]
    first_seen = {RowId(STAGING, f"r{i}/c"): seen(0) for i in range(6)}
    result = plan(rows, References(), first_seen, NOW, policy(max_delete_fraction=0.5))
    assert result.abort_reason is not None and "6 of 10" in result.abort_reason


def test_blast_radius_quiet_below_the_row_floor() -> None:
    rows = [obs(f"r{i}/c") for i in range(10)]
    first_seen = {RowId(STAGING, f"r{i}/c"): seen(0) for i in range(6)}
    result = plan(rows, References(), first_seen, NOW, policy(max_delete_fraction=0.5, fraction_min_rows=6))
    assert result.abort_reason is None


def test_record_from_the_future_restarts_the_clock() -> None:
    row = RowId(STAGING, "r1/c1")
    result = plan([obs("r1/c1")], References(), {row: seen(NOW + 5)}, NOW, policy())
    assert result.first_seen_upserts[row].at_ms == NOW


# ---------------------------------------------------------------------------- properties

KEYS = st.sampled_from(
    [f"r{i}/c{j}" for i in range(4) for j in range(3)] + ["__generation_cut__/k/r/c/0", "x"]
)
ROWS = st.builds(RowId, st.sampled_from([STAGING, "rollout_data"]), KEYS)
ROW_SETS = st.frozensets(ROWS, max_size=12)


@st.composite
def snapshots(
    draw: st.DrawFn,
) -> tuple[list[Observation], References, dict[RowId, FirstSeen], int, PlanPolicy]:
    listed = draw(ROW_SETS)
    digests = {row: draw(st.sampled_from(["a", "b"])) for row in listed}
    observations = [Observation(row, digests[row]) for row in sorted(listed)]
    refs = References(draw(ROW_SETS), draw(ROW_SETS), draw(ROW_SETS))
    first_seen = {
        row: FirstSeen(draw(st.integers(0, NOW + 1000)), Identity(draw(st.sampled_from(["a", "b"]))))
        for row in draw(ROW_SETS)
    }
    pol = policy(
        grace_ms=draw(st.integers(0, NOW)),
        max_deletes=draw(st.integers(0, 20)),
        max_delete_fraction=draw(st.floats(0.01, 1.0)),
    )
    return observations, refs, first_seen, draw(st.integers(NOW - 100, NOW + 100)), pol


@settings(max_examples=400)
@given(snapshots())
def test_no_referenced_or_young_or_out_of_scope_row_is_deleted(
    snap: tuple[list[Observation], References, dict[RowId, FirstSeen], int, PlanPolicy],
) -> None:
    observations, refs, first_seen, now, pol = snap
    result = plan(observations, refs, first_seen, now, pol)
    referenced = refs.admissions | refs.manifests | refs.tags
    for row in result.to_delete:
        assert row not in referenced
        assert pol.in_scope(row)
        record = first_seen[row]
        assert now - record.at_ms >= pol.grace_ms
        assert record.identity.tags_digest == next(o.tags_digest for o in observations if o.row == row)
    assert len(result.to_delete) <= pol.max_deletes


@settings(max_examples=400)
@given(snapshots())
def test_buckets_partition_the_in_scope_rows(
    snap: tuple[list[Observation], References, dict[RowId, FirstSeen], int, PlanPolicy],
) -> None:
    observations, refs, first_seen, now, pol = snap
    result = plan(observations, refs, first_seen, now, pol)
    in_scope = {o.row for o in observations if pol.in_scope(o.row)}
    assert set(result.decisions) == in_scope
    assert {r for r, d in result.decisions.items() if d is Decision.DELETE} == set(result.to_delete)
    counts = result.counts()
    assert sum(counts.referenced.values()) + counts.within_grace + counts.eligible == counts.in_scope


@settings(max_examples=400)
@given(snapshots())
def test_every_old_unreferenced_row_is_deleted_or_capped(
    snap: tuple[list[Observation], References, dict[RowId, FirstSeen], int, PlanPolicy],
) -> None:
    observations, refs, first_seen, now, pol = snap
    result = plan(observations, refs, first_seen, now, pol)
    referenced = refs.admissions | refs.manifests | refs.tags
    for o in observations:
        record = first_seen.get(o.row)
        if record is None or record.identity.tags_digest != o.tags_digest:
            continue
        if pol.in_scope(o.row) and o.row not in referenced and now - record.at_ms >= max(pol.grace_ms, 0):
            assert result.decisions[o.row] in (Decision.DELETE, Decision.KEEP_OVER_CAP)
