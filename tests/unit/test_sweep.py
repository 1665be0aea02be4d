"""One sweep, end to end, on the memory row store and the memory state with a manual clock.

Each test is a scenario written as steps; where a race matters, a write is slipped in between two
steps of the sweep through the scripted store's hooks, and the test asserts what was (not) deleted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tq_gc.config import Limits
from tq_gc.errors import StoreUnavailable
from tq_gc.report import Outcome, SweepReport
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.sweep import Collector
from tq_gc.sweep.lease import LEASE_TTL_SECONDS

from support.world import DATA, GRACE_S, STAGING, World


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def three_batches_eligible(tmp_path: Path) -> World:
    """Six orphans past their grace, deleted two per batch."""
    world = World(tmp_path, delete_batch_rows=2, limits={"max_delete_fraction": 1.0})
    for i in range(6):
        world.rows.put(STAGING, f"r{i}/c")
    world.sweep()
    world.age()
    return world


def test_orphan_is_kept_within_grace_then_deleted(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    first = world.sweep()
    assert first.outcome is Outcome.COMPLETED
    assert first.counts.within_grace == 1 and world.staging() == {"r1/c1"}
    world.age(GRACE_S - 1)
    assert world.sweep().counts.deleted == 0
    world.age(2)
    report = world.sweep()
    assert report.counts.deleted == 1
    assert world.staging() == set()
    assert [d.key for d in report.deleted_sample] == ["r1/c1"]
    assert report.deleted_sample[0].unreferenced_seconds == pytest.approx(GRACE_S + 1)


@pytest.mark.parametrize("source", ["admission", "manifest", "tag"])
def test_referenced_row_survives_any_number_of_sweeps(world: World, source: str) -> None:
    world.rows.put(STAGING, "held/c1")
    world.rows.put(STAGING, "orphan/c1")
    if source == "admission":
        world.registry.admit("adm-1", {STAGING: ["held/c1"]}, ttl_seconds=10_000)
    elif source == "manifest":
        world.write_manifest(["held/c1"])
    else:
        world.rows.put(DATA, "g1_g0", {"route_assembly_plan": {"cleanup_staging_keys": ["held/c1"]}})
    for _ in range(3):
        world.sweep()
        world.age()
    assert world.staging() == {"held/c1"}
    assert (
        world.sweep().counts.referenced[
            {"admission": "admissions", "manifest": "manifests"}.get(source, "tags")
        ]
        == 1
    )


def test_canonical_partition_is_never_touched(world: World) -> None:
    world.rows.put(DATA, "g1_g0")
    world.sweep()
    world.age()
    world.sweep()
    assert world.rows.keys(DATA) == {"g1_g0", "sample-0"}


def test_referenced_again_restarts_the_clock(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.sweep()
    world.age(GRACE_S - 10)
    world.registry.admit("adm-1", {STAGING: ["r1/c1"]}, ttl_seconds=10_000)
    world.sweep()
    world.registry.release("adm-1")
    world.age(20)
    assert world.sweep().counts.deleted == 0, "unreferenced for 20 s since release; grace is 60 s"
    world.age(GRACE_S)
    assert world.sweep().counts.deleted == 1


def test_retired_manifest_releases_its_rows(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.write_manifest(["r1/c1"])
    world.sweep()
    world.age()
    world.sweep()
    world.write_manifest(["r1/c1"], state="retired")
    world.sweep()
    world.age()
    assert world.sweep().counts.deleted == 1


def test_dry_run_deletes_nothing_and_says_what_it_would(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.sweep(execute=False)
    world.age()
    report = world.sweep(execute=False)
    assert report.outcome is Outcome.DRY_RUN and report.dry_run
    assert report.counts.eligible == 1 and report.counts.deleted == 0
    assert world.rows.count("delete_if_unchanged") == 0
    assert world.staging() == {"r1/c1"}


def test_unparsable_manifest_aborts_with_nothing_deleted(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.sweep()
    world.age()
    path = world.write_manifest(["other"])
    path.write_text('{"format": "tq-gc/manifest/v1", "rows": ')
    report = world.sweep()
    assert report.outcome is Outcome.ABORTED
    assert "manifests" in (report.reason or "")
    assert world.staging() == {"r1/c1"} and world.rows.count("delete_if_unchanged") == 0


def test_admissions_expected_but_empty_abort(tmp_path: Path) -> None:
    world = World(tmp_path, admissions={"expect_nonempty": True})
    world.rows.put(STAGING, "r1/c1")
    assert world.sweep().outcome is Outcome.ABORTED


def test_held_lease_skips_a_second_sweeper(world: World) -> None:
    lease = world.state.acquire_lease("sidecar", 30_000)
    assert lease is not None
    report = world.sweep(holder="cronjob")
    assert report.outcome is Outcome.SKIPPED and "sidecar" in (report.reason or "")
    assert world.rows.count("list_rows") == world.rows.count("list_keys") == 0


def test_fence_up_skips_the_sweep(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.sweep()
    world.age()
    world.registry.fence("checkpoint-7", ttl_seconds=300)
    report = world.sweep()
    assert report.outcome is Outcome.SKIPPED and "checkpoint-7" in (report.reason or "")
    world.registry.unfence("checkpoint-7")
    assert world.sweep().counts.deleted == 1


def test_fence_raised_mid_sweep_stops_before_the_next_delete(tmp_path: Path) -> None:
    world = three_batches_eligible(tmp_path)
    # Raised while the first batch is being deleted: the second batch must not go.
    world.rows.before("delete_if_unchanged", lambda: world.registry.fence("ckpt", 300))
    report = world.sweep()
    assert report.outcome is Outcome.SKIPPED
    assert report.counts.deleted == 2 and len(world.staging()) == 4


def test_row_recreated_between_plan_and_delete_is_kept(world: World) -> None:
    world.rows.put(STAGING, "r1/c1", {"v": 1})
    world.sweep()
    world.age()
    # Key reuse: deleted and rewritten (new global index, same tags) after listing, before the re-check.
    world.rows.before("delete_if_unchanged", lambda: world.rows.put(STAGING, "r1/c1", {"v": 1}))
    report = world.sweep()
    assert report.counts.recheck_saved == 1 and report.counts.deleted == 0
    assert world.staging() == {"r1/c1"}


def test_row_admitted_between_plan_and_delete_is_kept(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.rows.put(STAGING, "r2/c1")
    world.sweep()
    world.age()
    # Writer race: a restored call admits its saved prefix after references were read.
    # (The first re-check renews the lease the sweep just took; the second opens the first batch.)
    world.state.before(
        "recheck", lambda: world.registry.admit("adm", {STAGING: ["r1/c1"]}, 600), after_calls=1
    )
    report = world.sweep()
    assert report.counts.recheck_saved == 1 and report.counts.deleted == 1
    assert world.staging() == {"r1/c1"}


def test_moving_reference_manifest_to_admission_is_never_unprotected(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.write_manifest(["r1/c1"])
    world.sweep()
    world.age()
    world.sweep()

    def restore() -> None:  # make-before-break: admit, then retire the manifest
        world.registry.admit("adm", {STAGING: ["r1/c1"]}, 600)
        world.write_manifest(["r1/c1"], state="retired")

    world.rows.before("list_rows", restore)
    report = world.sweep()
    assert report.counts.deleted == 0 and world.staging() == {"r1/c1"}


def test_lease_lost_mid_sweep_stops_before_the_next_delete(tmp_path: Path) -> None:
    world = three_batches_eligible(tmp_path)

    def lease_expires_and_is_taken() -> None:
        world.age(LEASE_TTL_SECONDS + 1)
        assert world.state.acquire_lease("cronjob", 60_000) is not None

    world.rows.before("delete_if_unchanged", lease_expires_and_is_taken)
    report = world.sweep()
    assert report.outcome is Outcome.ABORTED and "lease" in (report.reason or "")
    assert report.counts.deleted == 2 and world.rows.count("delete_if_unchanged") == 1
    assert len(world.staging()) == 4


def test_row_store_failing_mid_sweep_stops_deleting(tmp_path: Path) -> None:
    world = three_batches_eligible(tmp_path)

    def controller_dies() -> None:
        raise StoreUnavailable("TransferQueue controller unreachable")

    world.rows.before("delete_if_unchanged", controller_dies, after_calls=1)
    report = world.sweep()
    assert report.outcome is Outcome.ABORTED and "unreachable" in (report.reason or "")
    assert len(world.staging()) == 4
    assert world.state.lease_holder() is None, "the lease is released after an abort"


def test_cap_stops_at_the_count_and_the_rest_wait(tmp_path: Path) -> None:
    world = World(tmp_path)
    for i in range(5):
        world.rows.put(STAGING, f"r{i}/c")
    world.sweep()
    world.age()
    report = world.sweep(max_deletes=2)
    assert report.counts.deleted == 2 and report.counts.over_cap == 3
    assert world.sweep().counts.deleted == 3


def test_blast_radius_aborts_with_nothing_deleted(tmp_path: Path) -> None:
    world = World(tmp_path, limits={"max_delete_fraction": 0.5})
    rows = Limits.fraction_min_rows + 2  # above the eligible rows below which the guard stays quiet
    for i in range(rows):
        world.rows.put(STAGING, f"r{i}/c")
    world.registry.admit("adm", {STAGING: ["r0/c"]}, 10_000)
    world.sweep()
    world.age()
    report = world.sweep()
    assert report.outcome is Outcome.ABORTED and "blast radius" in (report.reason or "")
    assert len(world.staging()) == rows


def test_every_deleted_row_is_audited_and_every_run_recorded(world: World) -> None:
    world.rows.put(STAGING, "r1/c1", {"rollout_id": "r1"})
    world.sweep()
    world.age()
    report = world.sweep()
    audit = world.state.read_audit(report.run_id, 10)
    assert [(a.partition, a.key, a.run_id) for a in audit] == [(STAGING, "r1/c1", report.run_id)]
    assert audit[0].global_index is not None and audit[0].tags_digest
    assert next(r["run_id"] for r in world.state.recent_runs(5)) == report.run_id
    assert len(world.state.recent_runs(5)) == 2


def test_skipped_runs_are_recorded_too(world: World) -> None:
    world.registry.fence("ckpt", 300)
    report = world.sweep()
    assert world.state.recent_runs(1)[0]["outcome"] == "skipped" == report.outcome.value


def test_first_seen_is_dropped_for_rows_gone(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.sweep()
    world.rows.delete(STAGING, ["r1/c1"])
    world.sweep()
    assert world.state.load_first_seen(STAGING) == {}


def test_long_call_admission_outlives_grace(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.registry.admit("long", {STAGING: ["r1/c1"]}, ttl_seconds=GRACE_S)
    for _ in range(10):
        world.sweep()
        world.age(GRACE_S / 2)
        assert world.registry.renew("long", ttl_seconds=GRACE_S)
    assert world.staging() == {"r1/c1"}


def test_dead_publisher_stops_protecting_after_its_ttl(world: World) -> None:
    world.rows.put(STAGING, "r1/c1")
    world.registry.admit("dies", {STAGING: ["r1/c1"]}, ttl_seconds=30)
    world.sweep()
    world.age(31)
    world.sweep()
    assert world.staging() == {"r1/c1"}
    world.age()
    assert world.sweep().counts.deleted == 1


def test_report_rows_identify_the_run(world: World) -> None:
    doc = world.sweep().to_dict()
    assert set(doc) == {
        "run_id", "namespace", "dry_run", "outcome", "reason", "cause", "started_at", "finished_at",
        "counts", "phases_ms", "deleted_sample", "longest_tq_request", "row_store_identity",
        "bytes", "storage", "warnings", "pacing_ms", "listings",
    }  # fmt: skip


def test_a_reference_source_partition_is_listed_with_tags_a_swept_one_by_its_keys(world: World) -> None:
    """A tags source's partition must show a reference that moves between two of its rows during the
    listing (list_rows); the swept partition needs only its keys (a row its listing misses is kept, and a
    row's identity is read when it is first seen)."""
    world.rows.put(STAGING, "r1/call0", {"rollout_id": "r1"})
    world.sweep()

    listings = {(method, target) for method, target, _ in world.rows.calls if method.startswith("list_")}
    assert listings == {("list_keys", STAGING), ("list_rows", DATA)}


@pytest.mark.parametrize("change", ["recreated", "deleted"])
def test_a_swept_row_that_changes_between_its_listing_and_its_first_record_is_seen_afresh(
    world: World, change: str
) -> None:
    """The swept partition is listed by keys and global indexes; a new row's identity is read right
    after the plan. Not the row the listing saw any more (recreated under another index, or gone): no
    record, so its grace does not start from a sighting of another row."""
    world.rows.put(STAGING, "r1/c0", {"rollout_id": "r1"})

    def change_the_row() -> None:
        world.rows.delete(STAGING, ["r1/c0"])
        if change == "recreated":
            world.rows.put(STAGING, "r1/c0", {"rollout_id": "r1"})

    world.rows.before("identities", change_the_row)
    assert world.sweep().counts.within_grace == 1
    assert "r1/c0" not in world.state.load_first_seen(STAGING)

    world.sweep()
    records = world.state.load_first_seen(STAGING)
    assert ("r1/c0" in records) == (change == "recreated")
    if change == "recreated":
        assert records["r1/c0"].identity == world.rows.identities(STAGING, ["r1/c0"])["r1/c0"]


class ProtocolOnly:
    """A row store with the RowStore protocol's methods only (a user's own store): no list_keys."""

    def __init__(self, inner: MemoryRowStore) -> None:
        self.partitions = inner.partitions
        self.list_rows = inner.list_rows
        self.identities = inner.identities
        self.delete_if_unchanged = inner.delete_if_unchanged


def test_a_row_store_without_list_keys_is_listed_with_list_rows(world: World) -> None:
    world.rows.put(STAGING, "r1/c0", {"rollout_id": "r1"})
    store = ProtocolOnly(world.rows)

    def sweep() -> SweepReport:
        return Collector(world.config, world.state, store, holder="test").sweep(dry_run=False)

    assert sweep().counts.within_grace == 1
    world.age()
    assert sweep().counts.deleted == 1
    assert world.staging() == set()
    assert world.rows.count("list_keys") == 0
