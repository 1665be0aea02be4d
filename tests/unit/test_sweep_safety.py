"""Scenarios for the safety defects a review found, one per defect class, on the memory stores.

Each slips an action into a sweep at the step where the defect bit: a reference moving between sources
while the sweep lists, a fence coming and going after the references were read, the lease passing to
another sweeper while the first still marks, a gap in observation, a store failing mid-clear.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tq_gc.errors import StoreUnavailable
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import Cause, Outcome
from tq_gc.rows import Identity
from tq_gc.state.memory import MemoryState, SteadyClock
from tq_gc.sweep import Collector
from tq_gc.sweep.lease import LEASE_TTL_SECONDS

from support.baseline import with_old_baseline
from support.world import DATA, GRACE_S, STAGING, World

# A lease renewed every 0.5 s: the test-only parameter of the collector (the lease's TTL is no setting).
SHORT_LEASE = {"lease_ttl_seconds": 1.5}

KEY = "r1_g0_a1/call3"
ROUTE_PLAN_TAGS = {"route_assembly_plan": {"cleanup_staging_keys": [KEY]}}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def old_row(world: World) -> None:
    """KEY has been seen unreferenced for a full grace: only a reference keeps it now."""
    world.rows.put(STAGING, KEY)
    world.sweep()
    world.age()


def after_the_tag_partition_is_listed(world: World, action: Any) -> None:
    # Partitions are listed in name order: rollout_data (with its tags), then rollout_staging (its keys).
    world.rows.before("list_keys", action)


# a reference moving between sources during the sweep ----------------------------------------------


def test_admission_to_tag_move_while_listing_is_seen(world: World) -> None:
    old_row(world)
    world.registry.admit("adm-1", {STAGING: [KEY]}, ttl_seconds=600)

    def publisher_moves_reference() -> None:  # make-before-break: the row naming KEY, then release
        world.rows.put(DATA, "g1_g0", ROUTE_PLAN_TAGS)
        world.registry.release("adm-1")

    after_the_tag_partition_is_listed(world, publisher_moves_reference)
    report = world.sweep()
    assert KEY in world.staging()
    assert report.counts.deleted == 0 and report.outcome is Outcome.COMPLETED


def test_manifest_to_tag_move_while_listing_is_seen(world: World) -> None:
    old_row(world)
    manifest = world.write_manifest([KEY])

    def trainer_moves_reference() -> None:
        world.rows.put(DATA, "g1_g0", ROUTE_PLAN_TAGS)
        manifest.unlink()

    after_the_tag_partition_is_listed(world, trainer_moves_reference)
    world.sweep()
    assert KEY in world.staging()


def test_tag_to_admission_move_while_listing_is_seen(world: World) -> None:
    old_row(world)
    world.rows.put(DATA, "g1_g0", ROUTE_PLAN_TAGS)

    def worker_moves_reference() -> None:
        world.registry.admit("adm-1", {STAGING: [KEY]}, ttl_seconds=600)
        world.rows.delete(DATA, ["g1_g0"])

    after_the_tag_partition_is_listed(world, worker_moves_reference)
    world.sweep()
    assert KEY in world.staging()


# fences are epochs ---------------------------------------------------------------------------------


def test_a_fence_that_came_and_went_after_the_references_were_read_stops_deletes(world: World) -> None:
    old_row(world)

    def checkpoint() -> None:  # fence, write a manifest naming the row, unfence: all between two reads
        world.registry.fence("ckpt-7", ttl_seconds=300)
        world.write_manifest([KEY], name="ckpt-7")
        world.registry.unfence("ckpt-7")

    # The first re-check renews the lease just taken; the second opens the first delete batch.
    world.state.before("recheck", checkpoint, after_calls=1)
    report = world.sweep()
    assert KEY in world.staging()
    assert (report.outcome, report.cause, report.counts.deleted) == (Outcome.SKIPPED, Cause.FENCE_RAISED, 0)
    assert world.sweep().counts.referenced["manifests"] == 1


# the lease guards every write ------------------------------------------------------------------------


def test_a_sweeper_that_lost_its_lease_while_marking_writes_nothing(world: World) -> None:
    world.rows.put(STAGING, KEY)
    world.sweep()
    successor: list[Any] = []

    def paused_past_the_lease() -> None:
        world.age(LEASE_TTL_SECONDS + 1)
        successor.append(world.sweep(holder="cronjob"))

    after_the_tag_partition_is_listed(world, paused_past_the_lease)
    stale = world.sweep(holder="sidecar")
    records_of_successor = world.state.load_first_seen(STAGING)

    assert successor[0].outcome is Outcome.COMPLETED
    assert (stale.outcome, stale.cause) == (Outcome.ABORTED, Cause.LEASE_LOST)
    assert world.state.load_first_seen(STAGING) == records_of_successor
    assert world.state.recent_runs(1)[0]["run_id"] == successor[0].run_id
    assert stale.run_id not in {run["run_id"] for run in world.state.recent_runs(10)}


# only observed time counts ---------------------------------------------------------------------------


def test_a_gap_in_sweeping_longer_than_grace_restarts_every_clock(world: World) -> None:
    world.rows.put(STAGING, KEY)
    world.sweep()
    world.age(3 * GRACE_S)  # nobody swept: a reference could have come and gone unseen
    assert world.sweep().counts.within_grace == 1
    world.age(GRACE_S / 2)
    world.sweep()
    assert KEY in world.staging()
    world.age(GRACE_S / 2)
    assert world.sweep().counts.deleted == 1


def test_a_partition_back_in_scope_starts_afresh(world: World, tmp_path: Path) -> None:
    world.rows.put(STAGING, KEY)
    world.sweep()
    elsewhere = World(tmp_path, scope=[{"partition": "other", "all_keys": True}])
    # Another sweeper, configured without the staging partition, sweeps the same state meanwhile.
    outside = Collector(elsewhere.config, world.state, world.rows, holder="other-config")
    world.age(GRACE_S / 2)
    world.registry.admit("adm-1", {STAGING: [KEY]}, ttl_seconds=600)
    assert outside.sweep(dry_run=False).outcome is Outcome.COMPLETED
    world.registry.release("adm-1")
    assert STAGING not in world.state.observed()

    world.age(GRACE_S / 2)
    report = world.sweep()
    assert (report.counts.deleted, report.counts.within_grace) == (0, 1)


# every delete audited --------------------------------------------------------------------------------


def test_a_clear_whose_answer_is_lost_stays_in_the_audit_unconfirmed(world: World) -> None:
    old_row(world)
    real_delete = world.rows.delete_if_unchanged

    def clear_then_time_out(partition: str, expected: Mapping[str, Identity]) -> set[str]:
        real_delete(partition, expected)
        raise StoreUnavailable("TransferQueue clear of 1 rows: no answer within 60 s")

    world.rows.delete_if_unchanged = clear_then_time_out  # type: ignore[method-assign]
    report = world.sweep()

    assert KEY not in world.staging()
    assert (report.outcome, report.cause, report.counts.failed) == (Outcome.ABORTED, Cause.STORE_FAILED, 1)
    [row] = world.state.read_audit(report.run_id, limit=10)
    assert (row.key, row.confirmed) == (KEY, False)


def test_a_confirmed_batch_lists_only_the_rows_deleted(world: World) -> None:
    world.rows.put(STAGING, "other/row")
    old_row(world)
    world.rows.before("delete_if_unchanged", lambda: world.rows.put(STAGING, "other/row", {"rewritten": 1}))
    report = world.sweep()
    audit = world.state.read_audit(report.run_id, limit=10)
    assert [(row.key, row.confirmed) for row in audit] == [(KEY, True)]
    assert (report.counts.deleted, report.counts.recheck_saved) == (1, 1)


# truthful outcomes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [OverflowError("int too large"), RecursionError("maximum recursion")])
def test_an_unforeseen_exception_ends_aborted_never_completed(world: World, error: Exception) -> None:
    def explode(partition: str) -> dict[str, Any]:
        raise error

    world.rows.list_rows = explode  # type: ignore[method-assign]
    report = world.sweep()
    assert (report.outcome, report.cause) == (Outcome.ABORTED, Cause.ERROR)
    assert report.reason is not None and report.reason.startswith(type(error).__name__)
    assert world.state.recent_runs(1)[0]["outcome"] == "aborted"


def test_a_sweep_stopped_part_way_says_how_many_rows_it_deleted(tmp_path: Path) -> None:
    world = World(tmp_path, delete_batch_rows=2, limits={"max_delete_fraction": 1.0})
    for i in range(6):
        world.rows.put(STAGING, f"r{i}/c")
    world.sweep()
    world.age()
    world.state.before("recheck", lambda: world.registry.fence("ckpt", 300), after_calls=2)
    report = world.sweep()
    assert (report.outcome, report.cause, report.counts.deleted) == (Outcome.SKIPPED, Cause.FENCE_UP, 2)


# stopping between batches, bad limits, clock steps, a listing longer than the lease -----------------


def test_stop_ends_the_sweep_between_two_batches(tmp_path: Path) -> None:
    world = World(tmp_path, delete_batch_rows=2, limits={"max_delete_fraction": 1.0})
    for i in range(6):
        world.rows.put(STAGING, f"r{i}/c")
    world.sweep()
    world.age()
    collector = Collector(world.config, world.state, world.rows)
    world.rows.before("delete_if_unchanged", collector.stop)
    report = collector.sweep(dry_run=False)
    assert (report.outcome, report.cause, report.counts.deleted) == (Outcome.ABORTED, Cause.STOPPED, 2)
    assert len(world.staging()) == 4


def test_a_negative_max_deletes_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match="max_deletes"):
        world.sweep(max_deletes=-1)


def test_the_memory_store_clock_does_not_follow_a_wall_clock_step(monkeypatch: pytest.MonkeyPatch) -> None:
    state = MemoryState("job")
    assert isinstance(state.clock_ms, SteadyClock)
    before = state.now_ms()
    real_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + 86_400 * 10**9)  # NTP steps a day ahead
    assert 0 <= state.now_ms() - before < 60_000


def test_the_lease_outlives_a_listing_longer_than_its_ttl(tmp_path: Path) -> None:
    """Attaching to a busy cluster or listing a million rows in paced windows can outlast the TTL: the
    lease is renewed in the background, and another sweeper keeps out meanwhile."""
    world = World(tmp_path)
    world.state = with_old_baseline(MemoryState("job-42"))  # the real (steady) clock: renewals in real time
    config = world.config
    world.rows.put(STAGING, KEY)
    contenders: list[Any] = []

    def slow_listing() -> None:  # 4 s: more than two TTLs, with renewals every 0.5 s
        time.sleep(2.0)
        contenders.append(Collector(config, world.state, world.rows, holder="cronjob", **SHORT_LEASE).sweep())
        time.sleep(2.0)

    world.rows.before("list_rows", slow_listing)
    report = Collector(config, world.state, world.rows, holder="sidecar", **SHORT_LEASE).sweep(dry_run=False)
    assert (report.outcome, report.counts.within_grace) == (Outcome.COMPLETED, 1), report.reason
    assert (contenders[0].outcome, contenders[0].cause) == (Outcome.SKIPPED, Cause.LEASE_HELD)


# the lease keeper, and a delete batch slower than the lease -----------------------------------------


def test_a_sweeping_thread_stalled_between_its_recheck_and_its_clear_stops_though_the_lease_was_renewed(
    world: World,
) -> None:
    """The background renewals keep the lease, but they must not vouch for the sweeping thread: a thread
    stalled past half the TTL after its re-check acts on a stale one."""
    old_row(world)
    world.state.before("record_intent", lambda: time.sleep(1.2))  # past half the TTL (0.75 s)
    collector = Collector(world.config, world.state, world.rows, holder="sidecar", **SHORT_LEASE)
    report = collector.sweep(dry_run=False)
    assert (report.outcome, report.cause) == (Outcome.ABORTED, Cause.LEASE_LOST), report.reason
    assert KEY in world.staging()


def test_a_delete_batch_slower_than_the_lease_stays_in_flight_until_it_ends(tmp_path: Path) -> None:
    """A checkpoint fence waits for the batch in flight: the mark must last as long as the clear, not
    one lease TTL from the intent."""
    world = World(tmp_path)
    world.state = with_old_baseline(MemoryState("job-42"))  # the real (steady) clock: the mark expires
    world.registry = AdmissionRegistry(world.state)
    config = world.config.model_copy(update={"grace_seconds": 1.0})
    world.rows.put(STAGING, KEY)
    for _ in range(2):  # seen unreferenced for 1.2 s by sweeps 0.6 s apart: due at the next one
        Collector(config, world.state, world.rows, **SHORT_LEASE).sweep(dry_run=False)
        time.sleep(0.6)
    seen_in_flight: list[bool] = []
    clear = world.rows.delete_if_unchanged

    def slow_clear(partition: str, identities: Mapping[str, Identity]) -> set[str]:
        time.sleep(2.0)  # longer than the TTL, renewed every 0.5 s meanwhile
        seen_in_flight.append(world.state.delete_in_flight())
        return clear(partition, identities)

    world.rows.delete_if_unchanged = slow_clear  # type: ignore[method-assign]
    report = Collector(config, world.state, world.rows, **SHORT_LEASE).sweep(dry_run=False)
    assert (report.outcome, report.counts.deleted) == (Outcome.COMPLETED, 1), report.reason
    assert seen_in_flight == [True], "the mark ran out while the batch was still clearing"
    assert world.state.delete_in_flight() is False


def test_a_row_gone_before_it_was_pinned_is_not_recorded_so_its_successor_starts_afresh(
    tmp_path: Path,
) -> None:
    """A partition swept and also read for tags keeps each row's tags from the listing. A row that goes
    before the sweep pins its global index must leave no record: a row written later under the same
    key, with the same tags, is another row and must wait out its own grace."""
    world = World(
        tmp_path,
        tag_references=[{"partition": STAGING, "key_path": "plan.keys", "target_partition": STAGING}],
    )
    world.rows.put(STAGING, KEY, {"plan": {"keys": []}})
    world.rows.before("identities", lambda: world.rows.delete(STAGING, [KEY]))  # the finalizer, mid-sweep
    world.sweep()
    world.rows.put(STAGING, KEY, {"plan": {"keys": []}})  # the same key and tags: a new row
    world.age()
    report = world.sweep()
    assert KEY in world.staging(), f"a new row deleted on its first sighting: {report.counts}"
    assert report.counts.within_grace == 1


def test_rows_saved_by_the_recheck_start_their_grace_again(world: World) -> None:
    """A batch whose every row was admitted after the plan: the rows were referenced, so their old
    records go. Released right after the sweep, they wait a full grace again, not seconds."""
    old_row(world)
    world.state.before("recheck", lambda: world.registry.admit("late", {STAGING: [KEY]}, 600), after_calls=1)
    report = world.sweep()
    assert (report.counts.deleted, report.counts.recheck_saved) == (0, 1), report.reason
    world.registry.release("late")
    world.age(GRACE_S / 2)
    world.sweep()
    assert KEY in world.staging(), "deleted half a grace after its admission was released"
    world.age(GRACE_S / 2)
    world.sweep()
    assert KEY in world.staging()  # first seen unreferenced again half a grace ago
    world.age(GRACE_S / 2)
    world.sweep()
    assert KEY not in world.staging()  # a full grace of sweeps seeing it unreferenced


def test_the_lease_lives_60_seconds_unless_a_test_says_otherwise(world: World) -> None:
    """The lease's TTL is fixed, not a setting (docs/configuration.md); tests hand the collector their own."""
    assert Collector(world.config, world.state, world.rows).lease.ttl_ms == 60_000 == LEASE_TTL_SECONDS * 1000
    assert Collector(world.config, world.state, world.rows, **SHORT_LEASE).lease.ttl_ms == 1500
