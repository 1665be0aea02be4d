"""One contract for every state store: each test runs on memory:// and on a real redis-server.

`advance(seconds)` lets time pass on the store's clock: a manual clock for memory, real sleeps for Redis
(short TTLs, ~500 ms). Redis-only tests at the bottom cover what only a network store can do wrong.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.testbed.redis_server import RedisServer, free_port
from tq_gc.audit import AuditBatch, DeletedRow
from tq_gc.config import MEMORY_SCHEME, STATE_SCHEMES, parse_config
from tq_gc.errors import ConfigError, FenceRaised, LeaseLost, StoreUnavailable
from tq_gc.first_seen import FirstSeen
from tq_gc.rows import Identity
from tq_gc.state import Lease, MemoryState, RedisState, StateStore, open_state
from tq_gc.state.keys import AUDIT_MAXLEN, AUDIT_PAGE, GENERATION_ROWS, RUNS_KEPT, Keys

Advance = Callable[[float], None]
TTL_MS = 2_000  # short enough to wait out; a busy 2-core machine may stall a step for a second
PAST_TTL_S = 2.5


KEYS = st.sampled_from([f"k{i}" for i in range(8)])
RECORDS = st.builds(
    FirstSeen,
    st.sampled_from([10, 20]),  # few times: rows join and leave shared generations
    st.builds(Identity, st.sampled_from(["d1", "d2"]), st.none() | st.integers(0, 3)),
)


def seen(at_ms: int, digest: str = "d1", index: int | None = None) -> FirstSeen:
    return FirstSeen(at_ms, Identity(digest, index))


def take_lease(state: StateStore, holder: str = "sweeper") -> Lease:
    lease = state.acquire_lease(holder, ttl_ms=60_000)
    assert lease is not None
    return lease


def save(state: StateStore, partition: str, upserts: dict[str, FirstSeen], drops: Iterable[str] = ()) -> None:
    """A save by a sweeper that holds the lease for just that write."""
    lease = take_lease(state)
    state.save_first_seen(lease, partition, upserts, drops, observed_ms=state.now_ms())
    state.release_lease(lease)


# first-seen times -------------------------------------------------------------------------------


def test_first_seen_round_trip_with_and_without_global_index(state: StateStore) -> None:
    records = {"a": seen(1, "d1", 7), "b": seen(2, "d2", None), "c|odd key ü": seen(3, "x|y", 0)}
    save(state, "staging", records)

    assert state.load_first_seen("staging") == records
    assert state.load_first_seen("other") == {}


def test_first_seen_upserts_replace_and_drops_remove(state: StateStore) -> None:
    save(state, "staging", {"a": seen(1), "b": seen(2)})
    save(state, "staging", {"a": seen(5, "d9", 3)}, drops=["b", "never-there"])

    assert state.load_first_seen("staging") == {"a": seen(5, "d9", 3)}


def test_first_seen_partitions_are_separate(state: StateStore) -> None:
    save(state, "p1", {"k": seen(1)})
    save(state, "p2", {"k": seen(2)})
    save(state, "p1", {}, drops=["k"])

    assert state.load_first_seen("p1") == {}
    assert state.load_first_seen("p2") == {"k": seen(2)}


def test_first_seen_many_rows_cross_chunks(state: StateStore) -> None:
    count = 2 * GENERATION_ROWS + 1_234  # the point: several generation fields, rewritten in part
    records = {f"key/{i}": seen(1_000 + i, f"d{i % 7}", i if i % 2 else None) for i in range(count)}
    save(state, "big", records)
    assert state.load_first_seen("big") == records

    dropped = {f"key/{i}" for i in range(0, count, 2)}
    save(state, "big", {}, drops=dropped)
    assert state.load_first_seen("big") == {k: v for k, v in records.items() if k not in dropped}


FIRST_SEEN_STEPS = st.one_of(
    st.tuples(
        st.just("save"),
        st.dictionaries(KEYS, RECORDS, max_size=6),
        st.sets(KEYS, max_size=3),
        st.booleans(),  # loaded just before the save, as a sweep does, or not
    ),
    st.tuples(st.just("confirm"), st.lists(KEYS, min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("forget")),
)


def apply_step(
    state: StateStore, lease: Lease, partition: str, step: tuple, model: dict[str, FirstSeen]
) -> None:
    """One step of FIRST_SEEN_STEPS (or a "load") on the store, and on `model`, the records it must hold."""
    op, *args = step
    if op == "save":
        upserts, drops, load_first = args
        if load_first:
            assert state.load_first_seen(partition) == model
        state.save_first_seen(lease, partition, upserts, drops, observed_ms=state.now_ms())
        model.update(upserts)
        for key in drops:
            model.pop(key, None)
    elif op == "confirm":
        [keys] = args
        intent = replace(batch("run", *keys), partition=partition)
        state.confirm_deletes(lease, intend(state, lease, intent), intent, set(keys), keys)
        for key in keys:
            model.pop(key, None)
    elif op == "forget":
        state.forget_partition(lease, partition)
        model.clear()
    else:
        assert state.load_first_seen(partition) == model


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(FIRST_SEEN_STEPS, max_size=10))
def test_first_seen_reads_back_as_written_through_any_interleaving(
    state: StateStore, steps: list[tuple]
) -> None:
    partition = f"p-{uuid.uuid4().hex}"  # examples share the store
    lease = take_lease(state)
    model: dict[str, FirstSeen] = {}
    try:
        for step in steps:
            apply_step(state, lease, partition, step, model)
            assert state.load_first_seen(partition) == model
    finally:
        state.release_lease(lease)


def test_saving_marks_the_partition_observed_and_forgetting_drops_it(state: StateStore) -> None:
    lease = take_lease(state)
    state.save_first_seen(lease, "p1", {"k": seen(1)}, [], observed_ms=1_234)
    state.save_first_seen(lease, "p2", {}, [], observed_ms=5_678)  # observed with nothing to record
    assert state.observed() == {"p1": 1_234, "p2": 5_678}

    state.forget_partition(lease, "p1")
    assert state.observed() == {"p2": 5_678}
    assert state.load_first_seen("p1") == {}


def test_a_sweeper_without_the_lease_writes_nothing(state: StateStore, advance: Advance) -> None:
    """A sweeper paused past its lease's TTL must not overwrite its successor's records or audit."""
    stale = state.acquire_lease("paused", ttl_ms=TTL_MS)
    assert stale is not None
    advance(PAST_TTL_S)
    successor = take_lease(state, "successor")
    state.save_first_seen(successor, "p", {"k": seen(50)}, [], observed_ms=50)
    intent_id = intend(state, successor, batch("new", "k"))

    with pytest.raises(LeaseLost):
        state.save_first_seen(stale, "p", {"k": seen(1), "j": seen(1)}, [], observed_ms=1)
    with pytest.raises(LeaseLost):
        state.forget_partition(stale, "p")
    with pytest.raises(LeaseLost):
        state.record_intent(stale, batch("old", "j"), fence_epoch=0, ttl_ms=60_000)
    with pytest.raises(LeaseLost):
        state.confirm_deletes(stale, intent_id, batch("new", "k"), deleted={"k"}, forget=["k"])
    assert state.record_run({"run_id": "old"}, stale) is False

    assert state.load_first_seen("p") == {"k": seen(50)} and state.observed() == {"p": 50}
    assert [(row.run_id, row.confirmed) for row in state.read_audit(None, 10)] == [("new", False)]
    assert state.recent_runs(10) == []
    assert state.record_run({"run_id": "new"}, successor) is True
    assert state.record_run({"run_id": "skipped"}) is True  # no lease: a sweep skipped before taking one


# the sweep lease --------------------------------------------------------------------------------


def test_lease_is_exclusive_until_released(state: StateStore) -> None:
    lease = state.acquire_lease("sidecar", ttl_ms=10_000)
    assert lease is not None
    assert state.acquire_lease("cronjob", ttl_ms=10_000) is None

    holder = state.lease_holder()
    assert holder is not None
    assert (holder.token, holder.holder) == (lease.token, "sidecar")
    assert abs(holder.expires_at_ms - lease.expires_at_ms) < 1_000

    state.release_lease(lease)
    assert state.lease_holder() is None
    assert state.acquire_lease("cronjob", ttl_ms=10_000) is not None


def test_lease_expiry_is_set_on_the_store_clock(state: StateStore) -> None:
    before = state.now_ms()
    lease = state.acquire_lease("sidecar", ttl_ms=10_000)
    assert lease is not None
    assert before + 10_000 <= lease.expires_at_ms <= state.now_ms() + 10_000


def test_only_the_owner_renews_or_releases(state: StateStore) -> None:
    lease = state.acquire_lease("sidecar", ttl_ms=10_000)
    assert lease is not None
    forged = Lease("not-the-token", lease.holder, lease.expires_at_ms)

    assert state.recheck(forged, ttl_ms=60_000).lease is None
    state.release_lease(forged)
    assert state.lease_holder() is not None

    renewed = state.recheck(lease, ttl_ms=60_000).lease
    assert renewed is not None
    assert renewed.token == lease.token
    assert renewed.expires_at_ms > lease.expires_at_ms


def test_lease_expires_after_its_ttl(state: StateStore, advance: Advance) -> None:
    lease = state.acquire_lease("sidecar", ttl_ms=TTL_MS)
    assert lease is not None
    advance(PAST_TTL_S)

    assert state.lease_holder() is None
    assert state.recheck(lease, ttl_ms=10_000).lease is None  # lost: the sweeper must stop
    successor = state.acquire_lease("cronjob", ttl_ms=10_000)
    assert successor is not None
    state.release_lease(lease)  # a stale release must not free the successor's lease
    holder = state.lease_holder()
    assert holder is not None
    assert holder.token == successor.token


def test_renewing_keeps_the_lease_alive(state: StateStore, advance: Advance) -> None:
    lease = state.acquire_lease("sidecar", ttl_ms=TTL_MS)
    for _ in range(3):
        advance(TTL_MS / 2000)
        assert lease is not None
        lease = state.recheck(lease, ttl_ms=TTL_MS).lease
    assert lease is not None
    assert state.acquire_lease("cronjob", ttl_ms=TTL_MS) is None


def test_recheck_renews_and_reads_fences_and_admissions_together(state: StateStore, advance: Advance) -> None:
    lease = state.acquire_lease("sidecar", ttl_ms=TTL_MS)
    assert lease is not None
    state.admit("adm", {"staging": ["k"]}, ttl_ms=60_000)
    state.raise_fence("ckpt", ttl_ms=60_000)
    state.raise_fence("brief", ttl_ms=TTL_MS)
    advance(TTL_MS / 2000)

    check = state.recheck(lease, ttl_ms=TTL_MS)
    assert check.lease is not None and check.lease.token == lease.token
    assert check.lease.expires_at_ms > lease.expires_at_ms
    assert check.fences == state.live_fences() and set(check.fences) == {"ckpt", "brief"}
    assert check.admissions_version == state.admissions_version() != 0

    advance(PAST_TTL_S)
    lost = state.recheck(check.lease, ttl_ms=TTL_MS)
    assert lost.lease is None and set(lost.fences) == {"ckpt"}
    forged = Lease("not-the-token", "sidecar", 0)
    assert state.acquire_lease("cronjob", ttl_ms=60_000) is not None
    assert state.recheck(forged, ttl_ms=60_000).lease is None


# runs and audit ---------------------------------------------------------------------------------


def test_runs_are_capped_and_newest_first(state: StateStore) -> None:
    for i in range(RUNS_KEPT + 5):
        state.record_run({"run_id": f"r{i}", "counts": {"deleted": i}})

    runs = state.recent_runs(RUNS_KEPT + 100)
    assert len(runs) == RUNS_KEPT
    assert runs[0] == {"run_id": f"r{RUNS_KEPT + 4}", "counts": {"deleted": RUNS_KEPT + 4}}
    assert runs[-1]["run_id"] == "r5"
    assert [r["run_id"] for r in state.recent_runs(2)] == [f"r{RUNS_KEPT + 4}", f"r{RUNS_KEPT + 3}"]
    assert state.recent_runs(0) == []


def deleted(run_id: str, key: str, index: int | None = 1, confirmed: bool = True) -> DeletedRow:
    return DeletedRow("staging", key, 901.25, index, "abc", run_id, confirmed)


def batch(run_id: str, *keys: str, indexes: tuple[int | None, ...] | None = None) -> AuditBatch:
    return AuditBatch(
        run_id=run_id,
        partition="staging",
        keys=keys,
        unreferenced_ms=(901_250,) * len(keys),
        global_indexes=indexes or (1,) * len(keys),
        tags_digests=("abc",) * len(keys),
    )


def intend(state: StateStore, lease: Lease, intent: AuditBatch) -> str:
    """record_intent at the fence epoch of now."""
    epoch = state.recheck(lease, ttl_ms=60_000).fence_epoch
    return state.record_intent(lease, intent, fence_epoch=epoch, ttl_ms=60_000)


def test_an_intent_is_refused_while_a_fence_is_up_or_once_one_came_and_went(state: StateStore) -> None:
    lease = take_lease(state)
    epoch = state.recheck(lease, ttl_ms=60_000).fence_epoch
    state.raise_fence("ckpt-7", ttl_ms=60_000)
    with pytest.raises(FenceRaised):
        state.record_intent(lease, batch("run", "a"), fence_epoch=epoch, ttl_ms=60_000)
    state.lower_fence("ckpt-7")
    with pytest.raises(FenceRaised):
        state.record_intent(lease, batch("run", "a"), fence_epoch=epoch, ttl_ms=60_000)
    assert state.read_audit(None, limit=10) == [] and not state.delete_in_flight()


def test_a_delete_is_in_flight_from_its_intent_to_its_confirmation(
    state: StateStore, advance: Advance
) -> None:
    lease = take_lease(state)
    intent = batch("run", "a")
    intent_id = intend(state, lease, intent)
    assert state.delete_in_flight()
    state.confirm_deletes(lease, intent_id, intent, {"a"}, forget=[])
    assert not state.delete_in_flight()

    epoch = state.recheck(lease, ttl_ms=60_000).fence_epoch
    state.record_intent(lease, batch("crashed", "b"), fence_epoch=epoch, ttl_ms=TTL_MS)
    assert state.delete_in_flight()
    advance(PAST_TTL_S)  # a sweeper that died mid-batch stops holding fences up after the TTL
    assert not state.delete_in_flight()


def test_a_delete_in_flight_stays_marked_while_its_sweeper_renews(
    state: StateStore, advance: Advance
) -> None:
    lease = take_lease(state)
    epoch = state.recheck(lease, ttl_ms=60_000).fence_epoch
    state.record_intent(lease, batch("slow", "a"), fence_epoch=epoch, ttl_ms=TTL_MS)
    for _ in range(3):  # 3 x 0.6 TTL: past the TTL the intent set, renewed all along
        advance(0.6 * TTL_MS / 1000)
        assert state.recheck(lease, ttl_ms=TTL_MS).lease is not None
        assert state.delete_in_flight(), "a clear still running was no longer marked"
    other = Lease("not-ours", "other", 0)
    state.recheck(other, ttl_ms=60_000)  # somebody else's renewal extends nothing of ours
    advance(PAST_TTL_S)  # the sweeper stopped renewing: dead, its mark goes after the TTL
    assert not state.delete_in_flight()


def record(state: StateStore, intent: AuditBatch, deleted: Iterable[str] | None = None) -> None:
    """Intent, then confirmation (all of its rows deleted unless `deleted` says which)."""
    lease = take_lease(state)
    intent_id = intend(state, lease, intent)
    gone = set(intent.keys if deleted is None else deleted)
    state.confirm_deletes(lease, intent_id, intent, gone, forget=intent.keys)
    state.release_lease(lease)


def test_audit_newest_first_and_filtered_by_run(state: StateStore) -> None:
    record(state, batch("run-1", "a", "b", indexes=(1, None)))
    record(state, batch("run-2", "c", "d"))
    record(state, batch("run-2"))

    assert state.read_audit("run-1", limit=10) == [deleted("run-1", "b", None), deleted("run-1", "a")]
    assert [r.key for r in state.read_audit(None, limit=3)] == ["d", "c", "b"]
    assert state.read_audit("run-3", limit=10) == []
    assert state.read_audit(None, limit=0) == []


def test_an_intent_is_durable_before_the_clear_and_confirmed_after(state: StateStore) -> None:
    """Write-ahead: a sweeper that dies between its intent and its confirmation leaves every row it
    may have deleted in the audit, marked unconfirmed; a confirmation keeps only the rows deleted."""
    lease = take_lease(state)
    crashed = intend(state, lease, batch("run-1", "a", "b"))
    confirmed = intend(state, lease, batch("run-2", "c", "d", "e"))
    state.confirm_deletes(lease, confirmed, batch("run-2", "c", "d", "e"), deleted={"c", "e"}, forget=[])

    assert crashed != confirmed
    assert state.read_audit(None, limit=10) == [
        deleted("run-2", "e"),
        deleted("run-2", "c"),
        deleted("run-1", "b", confirmed=False),
        deleted("run-1", "a", confirmed=False),
    ]


def test_confirming_deletes_drops_their_first_seen_records(state: StateStore) -> None:
    save(state, "staging", {"a": seen(1), "b": seen(2), "c": seen(3)})
    save(state, "other", {"a": seen(4)})
    record(state, batch("run-1", "a", "b", "never-seen"), deleted={"a"})

    assert state.load_first_seen("staging") == {"c": seen(3)}
    assert state.load_first_seen("other") == {"a": seen(4)}


def test_audit_filter_pages_past_other_runs(state: StateStore) -> None:
    record(state, batch("old", "x"))
    for i in range(3 * AUDIT_PAGE):
        record(state, batch("new", *(f"k{i}-{j}" for j in range(50))))

    assert state.read_audit("old", limit=5) == [deleted("old", "x")]
    newest = state.read_audit("new", limit=2_390)
    assert len(newest) == 2_390 and newest[0].key == f"k{3 * AUDIT_PAGE - 1}-49"
    assert all(row.confirmed for row in newest)


def test_audit_trims_whole_batches_and_keeps_the_newest_maxlen_rows(state: StateStore) -> None:
    size = AUDIT_MAXLEN // 50
    for i in range(60):
        record(state, batch(f"run-{i}", *(f"b{i}/{j}" for j in range(size))))

    kept = state.read_audit(None, limit=2 * AUDIT_MAXLEN)
    assert len(kept) == AUDIT_MAXLEN
    assert kept[0].key == f"b59/{size - 1}" and kept[-1].key == "b10/0"


def test_a_run_never_trims_its_own_audit(state: StateStore) -> None:
    """max_deletes_per_run may be above the cap: the log keeps a big run whole, older runs go first."""
    size = AUDIT_MAXLEN // 4
    record(state, batch("older", "x"))
    for i in range(6):
        record(state, batch("big", *(f"b{i}/{j}" for j in range(size))))

    kept = state.read_audit(None, limit=2 * AUDIT_MAXLEN)
    assert len(kept) == 6 * size and {row.run_id for row in kept} == {"big"}
    record(state, batch("next", "y"))  # the next run may trim it down to the cap, whole batches
    assert len(state.read_audit("big", limit=2 * AUDIT_MAXLEN)) == 4 * size  # b2..b5: the cap, with "y"


def test_audit_never_trims_the_newest_batch(state: StateStore) -> None:
    record(state, batch("old", "x"))
    record(state, batch("huge", *(f"k{j}" for j in range(AUDIT_MAXLEN + 5))))

    kept = state.read_audit(None, limit=2 * AUDIT_MAXLEN)
    assert len(kept) == AUDIT_MAXLEN + 5 and {row.run_id for row in kept} == {"huge"}


# admissions and fences --------------------------------------------------------------------------


def test_admissions_admit_renew_release(state: StateStore) -> None:
    state.admit("adm-1", {"staging": ["a", "b"], "other": ["c"]}, ttl_ms=10_000)
    state.admit("adm-2", {"staging": ["d"]}, ttl_ms=10_000)
    assert state.live_admissions() == {
        "adm-1": {"staging": ["a", "b"], "other": ["c"]},
        "adm-2": {"staging": ["d"]},
    }

    assert state.renew_admission("adm-1", ttl_ms=10_000) is True
    assert state.renew_admission("unknown", ttl_ms=10_000) is False
    state.release_admission("adm-1")
    state.release_admission("unknown")
    assert state.live_admissions() == {"adm-2": {"staging": ["d"]}}


def test_admitting_again_replaces_rows_and_expiry(state: StateStore, advance: Advance) -> None:
    state.admit("adm-1", {"staging": ["a"]}, ttl_ms=10_000)
    state.admit("adm-1", {"staging": ["b"]}, ttl_ms=TTL_MS)
    assert state.live_admissions() == {"adm-1": {"staging": ["b"]}}

    advance(PAST_TTL_S)
    assert state.live_admissions() == {}


def test_admissions_version_moves_on_every_admit_only(state: StateStore) -> None:
    start = state.admissions_version()
    state.admit("adm-1", {"staging": ["a"]}, ttl_ms=10_000)
    after_admit = state.admissions_version()
    state.admit("adm-1", {"staging": ["b"]}, ttl_ms=10_000)
    after_replace = state.admissions_version()
    assert len({start, after_admit, after_replace}) == 3
    assert state.renew_admission("adm-1", 10_000)
    state.release_admission("adm-1")
    assert state.admissions_version() == after_replace, "renewals and releases add no protection"


def test_the_barrier_holds_every_key_admitted_since_the_lease_was_taken(state: StateStore) -> None:
    state.admit("before", {"staging": ["old"]}, ttl_ms=60_000)  # live when the sweep reads: not its job
    lease = take_lease(state)
    state.admit("hop", {"staging": ["a", "b"], "other": ["c"]}, ttl_ms=60_000)
    state.release_admission("hop")  # released, and still in the barrier: the reference moved on
    state.admit("short", {"staging": ["d"]}, ttl_ms=1)

    asked = ["a", "b", "c", "d", "old", "never"]
    assert state.admitted_since_lease(lease, "staging", asked) == {"a", "b", "d"}
    assert state.admitted_since_lease(lease, "other", asked) == {"c"}
    assert state.admitted_since_lease(lease, "staging", []) == set()


def test_members_of_the_barrier_never_mix_partition_and_key(state: StateStore) -> None:
    lease = take_lease(state)
    state.admit("x", {"ab": ["c"], "p:1": ["k"]}, ttl_ms=60_000)
    assert state.admitted_since_lease(lease, "a", ["bc"]) == set()
    assert state.admitted_since_lease(lease, "ab", ["c"]) == {"c"}
    assert state.admitted_since_lease(lease, "p", ["1k", ":1k"]) == set()


def test_each_lease_starts_its_own_barrier_and_only_its_holder_reads_it(
    state: StateStore, advance: Advance
) -> None:
    first = take_lease(state, "first")
    state.admit("hop", {"staging": ["a"]}, ttl_ms=60_000)
    state.release_lease(first)
    state.admit("between", {"staging": ["b"]}, ttl_ms=60_000)  # no sweep holds the lease: no barrier
    second = take_lease(state, "second")
    assert state.admitted_since_lease(second, "staging", ["a", "b"]) == set()
    with pytest.raises(LeaseLost):
        state.admitted_since_lease(first, "staging", ["a"])

    state.admit("later", {"staging": ["c"]}, ttl_ms=60_000)
    assert state.admitted_since_lease(second, "staging", ["a", "b", "c"]) == {"c"}


def test_the_barrier_takes_many_keys_in_one_admission_and_one_question(state: StateStore) -> None:
    lease = take_lease(state)
    keys = [f"r{i}/call" for i in range(2_500)]
    state.admit("big", {"staging": keys[::2]}, ttl_ms=60_000)
    assert state.admitted_since_lease(lease, "staging", keys) == set(keys[::2])


def test_admissions_expire_on_the_store_clock(state: StateStore, advance: Advance) -> None:
    state.admit("short", {"staging": ["a"]}, ttl_ms=TTL_MS)
    state.admit("long", {"staging": ["b"]}, ttl_ms=60_000)
    advance(PAST_TTL_S)

    assert state.live_admissions() == {"long": {"staging": ["b"]}}
    assert state.renew_admission("short", ttl_ms=60_000) is False  # too late: re-admit instead
    assert state.live_admissions() == {"long": {"staging": ["b"]}}


def test_renewal_keeps_an_admission_alive(state: StateStore, advance: Advance) -> None:
    state.admit("adm", {"staging": ["a"]}, ttl_ms=TTL_MS)
    for _ in range(3):
        advance(TTL_MS / 2000)
        assert state.renew_admission("adm", ttl_ms=TTL_MS) is True
    assert list(state.live_admissions()) == ["adm"]


def test_an_admission_renewed_for_less_expires_at_the_new_time(state: StateStore, advance: Advance) -> None:
    state.admit("long", {"staging": ["a"]}, ttl_ms=60_000)
    state.admit("other", {"staging": ["b"]}, ttl_ms=60_000)
    assert list(state.live_admissions()) == ["long", "other"]  # read (and pruned) once before the renewal
    assert state.renew_admission("long", ttl_ms=TTL_MS) is True
    advance(PAST_TTL_S)
    assert list(state.live_admissions()) == ["other"]


def test_a_fence_raised_and_lowered_between_two_rechecks_moves_the_epoch(state: StateStore) -> None:
    lease = take_lease(state)
    before = state.recheck(lease, ttl_ms=60_000)
    state.raise_fence("ckpt-7", ttl_ms=60_000)
    state.lower_fence("ckpt-7")
    after = state.recheck(lease, ttl_ms=60_000)

    assert after.fences == {} and after.fence_epoch != before.fence_epoch
    assert state.recheck(lease, ttl_ms=60_000).fence_epoch == after.fence_epoch  # reading moves nothing


def test_fences_up_down_and_expiry(state: StateStore, advance: Advance) -> None:
    now = state.now_ms()
    state.raise_fence("checkpoint-7", ttl_ms=60_000)
    state.raise_fence("short", ttl_ms=TTL_MS)
    fences = state.live_fences()
    assert set(fences) == {"checkpoint-7", "short"}
    assert now + 60_000 <= fences["checkpoint-7"] <= state.now_ms() + 60_000

    advance(PAST_TTL_S)
    assert set(state.live_fences()) == {"checkpoint-7"}
    state.lower_fence("checkpoint-7")
    state.lower_fence("never-raised")
    assert state.live_fences() == {}


def test_raising_a_fence_again_never_shortens_it(state: StateStore) -> None:
    state.raise_fence("ckpt", ttl_ms=60_000)
    long_expiry = state.live_fences()["ckpt"]
    state.raise_fence("ckpt", ttl_ms=1_000)
    assert state.live_fences()["ckpt"] == long_expiry
    state.raise_fence("ckpt", ttl_ms=600_000)
    assert state.live_fences()["ckpt"] > long_expiry


# the clock --------------------------------------------------------------------------------------


def test_now_moves_forward_with_the_store_clock(state: StateStore, advance: Advance) -> None:
    first = state.now_ms()
    advance(0.1)
    second = state.now_ms()
    assert 90 <= second - first < 5_000
    assert abs(first - time.time() * 1000) < 10**12  # milliseconds since the epoch, not seconds


# redis only -------------------------------------------------------------------------------------


def test_an_admission_whose_rows_were_evicted_fails_closed(redis_url: str) -> None:
    """Under a maxmemory policy Redis may evict the rows hash and keep the expiry: that admission must
    not read as one that holds nothing."""
    store = RedisState.from_url(redis_url, "job")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        store.admit("adm-1", {"staging": ["k"]}, ttl_ms=60_000)
        client.delete(Keys("job").admission_rows)
        with pytest.raises(StoreUnavailable, match="adm-1 has no rows"):
            store.live_admissions()
        with pytest.raises(StoreUnavailable, match="adm-1 has no rows"):
            store.live_admission_rows()
    finally:
        client.close()
        store.close()


def test_a_save_computed_from_records_saved_over_since_is_computed_again(redis_url: str) -> None:
    """Two processes (a CronJob after a sidecar): one loads, the other saves, then the first saves.
    Rewriting the generations it read would bring back a row the other dropped."""
    first, second = RedisState.from_url(redis_url, "stale"), RedisState.from_url(redis_url, "stale")
    try:
        save(first, "p", {"k": seen(1), "j": seen(1), "m": seen(1)})
        assert first.load_first_seen("p") == {"k": seen(1), "j": seen(1), "m": seen(1)}
        save(second, "p", {}, drops=["k"])
        save(first, "p", {"n": seen(2)}, drops=["j"])

        assert second.load_first_seen("p") == {"m": seen(1), "n": seen(2)}
    finally:
        first.close()
        second.close()


SWEEPERS = st.sampled_from(["keeper", "keeper", "other"])  # mostly the keeper: its loads follow its saves


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(SWEEPERS, FIRST_SEEN_STEPS | st.tuples(st.just("load"))), max_size=14))
def test_a_sweeper_that_keeps_what_it_saved_loads_what_redis_holds_through_any_interleaving(
    redis_url: str, steps: list[tuple]
) -> None:
    """A sidecar keeps the records it saved and reads back only the version and the tombstones. Another
    sweeper (a CronJob) saves, confirms deletes and forgets in between; after every step a reader that
    keeps nothing, and any load by either, must see exactly the records written. Generations of two and
    three rows: saves split them into several fields."""
    namespace = f"keep-{uuid.uuid4().hex}"  # examples share the server
    sweepers = {name: RedisState.from_url(redis_url, namespace) for name in ("keeper", "other")}
    sweepers["keeper"].generation_rows, sweepers["other"].generation_rows = 2, 3
    model: dict[str, FirstSeen] = {}
    try:
        for who, step in steps:
            state = sweepers[who]
            lease = take_lease(state, holder=who)
            apply_step(state, lease, "p", step, model)
            state.release_lease(lease)
            judge = RedisState.from_url(redis_url, namespace)
            try:
                assert judge.load_first_seen("p") == model, step
            finally:
                judge.close()
    finally:
        for state in sweepers.values():
            state.close()


def test_a_load_after_its_own_save_reads_the_version_and_tombstones_not_the_generations(
    redis_url: str,
) -> None:
    keeper = RedisState.from_url(redis_url, "kept")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        save(keeper, "staging", {f"key/{i}": seen(7, "d1", i) for i in range(5)})
        record(keeper, batch("run-1", "key/1"), deleted={"key/1"})
        client.config_resetstat()
        loaded = keeper.load_first_seen("staging")
        reads = client.info("commandstats")
        assert reads["cmdstat_hget"]["calls"] == 2, reads  # the version, before and after the tombstones
        assert "cmdstat_hkeys" not in reads and "cmdstat_hgetall" not in reads, reads
        assert loaded == {f"key/{i}": seen(7, "d1", i) for i in (0, 2, 3, 4)}
    finally:
        client.close()
        keeper.close()


def test_a_save_computed_before_a_confirmed_delete_is_computed_again(redis_url: str) -> None:
    """Loaded, then a delete of k confirmed (its tombstone), then k saved afresh from the earlier load:
    the tombstone is older than the new record and must not remove it (as a version change, it makes
    the save read again)."""
    store = RedisState.from_url(redis_url, "tombstoned-since")
    try:
        save(store, "p", {"k": seen(1), "j": seen(1)})
        assert store.load_first_seen("p") == {"k": seen(1), "j": seen(1)}
        record(store, replace(batch("run-1", "k"), partition="p"))
        save(store, "p", {"k": seen(2)})

        assert store.load_first_seen("p") == {"k": seen(2), "j": seen(1)}
    finally:
        store.close()


def test_a_partition_is_a_few_fields_and_a_confirmed_batch_one_tombstone(redis_url: str) -> None:
    store = RedisState.from_url(redis_url, "layout")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys("layout")
    try:
        client.hset(keys.legacy_first_seen("staging"), "old-row", "1|d1|")  # the earlier layout
        records = {f"key/{i}": seen(7, "d1", i) for i in range(GENERATION_ROWS + 1)}
        save(store, "staging", records)
        assert client.hlen(keys.first_seen("staging")) == 3  # two generation fields and the version
        assert not client.exists(keys.legacy_first_seen("staging"))

        record(store, batch("run-1", "key/1", "key/2"), deleted={"key/1", "key/2"})
        record(store, batch("run-1", "key/3"), deleted={"key/3"})
        assert client.llen(keys.first_seen_tombstones("staging")) == 2
        assert len(store.load_first_seen("staging")) == GENERATION_ROWS - 2
        save(store, "staging", {})
        assert client.llen(keys.first_seen_tombstones("staging")) == 0
        assert len(store.load_first_seen("staging")) == GENERATION_ROWS - 2
    finally:
        client.close()
        store.close()


def test_now_is_redis_time(redis_url: str) -> None:
    store = RedisState.from_url(redis_url, "clock")
    client = redis.Redis.from_url(redis_url)
    try:
        seconds, microseconds = client.time()
        server_ms = seconds * 1000 + microseconds // 1000
        assert abs(store.now_ms() - server_ms) < 1_000
    finally:
        client.close()
        store.close()


def exercise(store: StateStore) -> None:
    save(store, "staging", {"k": seen(1)})
    store.record_run({"run_id": store.namespace})
    record(store, batch(store.namespace, "k"))
    lease = store.acquire_lease("me", ttl_ms=60_000)
    assert lease is not None
    store.admit("adm", {"staging": [store.namespace]}, ttl_ms=60_000)
    store.raise_fence("fence", ttl_ms=60_000)


def test_namespaces_on_one_redis_never_see_each_other(redis_url: str) -> None:
    job_a, job_b = RedisState.from_url(redis_url, "job-a"), RedisState.from_url(redis_url, "job-b")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        exercise(job_a)
        assert job_b.load_first_seen("staging") == {}
        assert job_b.lease_holder() is None
        assert job_b.recent_runs(10) == []
        assert job_b.read_audit(None, 10) == []
        assert job_b.live_admissions() == {}
        assert job_b.live_fences() == {}

        exercise(job_b)
        assert job_a.live_admissions() == {"adm": {"staging": ["job-a"]}}
        assert [run["run_id"] for run in job_a.recent_runs(10)] == ["job-a"]
        keys = set(client.scan_iter())
        assert keys and all(k.startswith(("tqgc:{job-a}:", "tqgc:{job-b}:")) for k in keys)
    finally:
        client.close()
        job_a.close()
        job_b.close()


def every_call(store: StateStore) -> dict[str, Callable[[], object]]:
    lease = Lease("token", "me", 0)
    return {
        "now_ms": store.now_ms,
        "load_first_seen": lambda: store.load_first_seen("p"),
        "observed": store.observed,
        "save_first_seen": lambda: store.save_first_seen(lease, "p", {"k": seen(1)}, ["j"], 1),
        "forget_partition": lambda: store.forget_partition(lease, "p"),
        "acquire_lease": lambda: store.acquire_lease("me", 1_000),
        "release_lease": lambda: store.release_lease(lease),
        "lease_holder": store.lease_holder,
        "recheck": lambda: store.recheck(lease, 1_000),
        "record_run": lambda: store.record_run({"run_id": "r"}, lease),
        "recent_runs": lambda: store.recent_runs(5),
        "record_intent": lambda: store.record_intent(lease, batch("r", "k"), 0, 1_000),
        "delete_in_flight": store.delete_in_flight,
        "confirm_deletes": lambda: store.confirm_deletes(lease, "0-1", batch("r", "k"), {"k"}, ["k"]),
        "read_audit": lambda: store.read_audit(None, 5),
        "admit": lambda: store.admit("a", {"p": ["k"]}, 1_000),
        "renew_admission": lambda: store.renew_admission("a", 1_000),
        "release_admission": lambda: store.release_admission("a"),
        "live_admissions": store.live_admissions,
        "live_admission_rows": store.live_admission_rows,
        "raise_fence": lambda: store.raise_fence("f", 1_000),
        "lower_fence": lambda: store.lower_fence("f"),
        "live_fences": store.live_fences,
        "admitted_since_lease": lambda: store.admitted_since_lease(lease, "p", ["k"]),
    }


def test_every_call_raises_store_unavailable_once_redis_is_gone() -> None:
    with RedisServer() as server:
        store = RedisState.from_url(server.url, "job")
        for name, call in every_call(store).items():
            try:
                call()  # all fine while the server is up (bar the lease we do not hold)
            except LeaseLost:
                assert name in {
                    "save_first_seen",
                    "forget_partition",
                    "record_intent",
                    "confirm_deletes",
                    "admitted_since_lease",
                }
            except FenceRaised:
                assert name == "record_intent"
        server.stop()

        for name, call in every_call(store).items():
            with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{server.port}") as caught:
                call()
            assert "failed to" in str(caught.value), name
        store.close()


def test_password_never_appears_in_errors_or_repr() -> None:
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    store = RedisState.from_url(url, "job")
    try:
        assert "s3cret-pw" not in repr(store)
        with pytest.raises(StoreUnavailable) as caught:
            store.live_admissions()
        chain = [caught.value, caught.value.__cause__]
        assert "***" in str(caught.value)
        assert all("s3cret-pw" not in f"{exc!s} {exc!r}" for exc in chain)
    finally:
        store.close()


def test_malformed_url_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        RedisState.from_url("redis://:s3cret-pw@127.0.0.1:notaport/0", "job")
    assert "s3cret-pw" not in str(caught.value)


class CountingRedis(redis.Redis):
    closed = 0

    def close(self) -> None:
        self.closed += 1
        super().close()


def test_closes_only_the_client_it_opened(redis_url: str) -> None:
    client = CountingRedis.from_url(redis_url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    store = RedisState(client, "job", owns_client=False)
    store.close()
    assert client.closed == 0
    assert client.ping()

    RedisState(client, "job", owns_client=True).close()
    assert client.closed == 1


def test_refuses_a_client_that_returns_bytes(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(ValueError, match="decode_responses=True"):
            RedisState(client, "job", owns_client=False)
    finally:
        client.close()


# open_state -------------------------------------------------------------------------------------


def test_open_state_dispatches_on_scheme(redis_url: str) -> None:
    memory = open_state("memory://", "job")
    assert isinstance(memory, MemoryState)
    assert memory.namespace == "job"
    shared = open_state(redis_url, "job")
    try:
        assert isinstance(shared, RedisState)
        assert shared.live_fences() == {}
    finally:
        shared.close()
    with pytest.raises(ConfigError, match="not a state store URL"):
        open_state("postgres://:pw@db/0", "job")


def test_every_scheme_a_config_accepts_opens_a_state_store() -> None:
    """One list of schemes: whatever state_url the config accepts, open_state opens (Redis lazily)."""
    urls = {"memory": "memory://", "redis": "redis://127.0.0.1:1/0", "rediss": "rediss://127.0.0.1:1/0"}
    for scheme in STATE_SCHEMES:
        url = urls.get(scheme, f"{scheme}:///nowhere/redis.sock")
        store = open_state(parse_config({"state_url": url}).state_url, "job")
        try:
            assert isinstance(store, MemoryState if scheme == MEMORY_SCHEME else RedisState), scheme
        finally:
            store.close()


def test_namespace_with_braces_is_refused() -> None:
    with pytest.raises(ValueError, match="hash tag"):
        MemoryState("job}{x")


# replicated Redis: writes that must survive a failover wait for replicas ------------------------


def replica_of(primary: RedisServer) -> RedisServer:
    replica = RedisServer().start()
    redis.Redis(port=replica.port).replicaof("127.0.0.1", primary.port)
    deadline = time.monotonic() + 120  # a hang guard: a starved machine may take a while
    while time.monotonic() < deadline:
        if redis.Redis(port=replica.port).info("replication").get("master_link_status") == "up":
            return replica
        time.sleep(0.05)
    replica.stop()
    raise AssertionError("the replica never caught up with its primary")


def test_with_wait_replicas_an_admission_fence_and_intent_are_on_a_replica_when_they_return() -> None:
    with RedisServer() as primary:
        replica = replica_of(primary)
        try:
            store = RedisState.from_url(f"{primary.url}?wait_replicas=1", "job")
            keys, on_replica = Keys("job"), redis.Redis(port=replica.port, decode_responses=True)
            store.admit("adm", {"staging": ["a"]}, ttl_ms=60_000)
            assert on_replica.hget(keys.admission_rows, "adm") is not None
            store.raise_fence("ckpt", ttl_ms=60_000)
            assert on_replica.zscore(keys.fences, "ckpt") is not None
            store.lower_fence("ckpt")
            lease = take_lease(store)
            epoch = store.recheck(lease, ttl_ms=60_000).fence_epoch
            store.record_intent(lease, batch("run", "a"), fence_epoch=epoch, ttl_ms=60_000)
            assert on_replica.xlen(keys.audit) == 1

            replica.stop()  # no replica acknowledges: the write is not durable, and says so
            with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
                store.admit("adm-2", {"staging": ["b"]}, ttl_ms=60_000)
            with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
                store.record_intent(lease, batch("run", "b"), fence_epoch=epoch, ttl_ms=60_000)
            store.close()
            plain = RedisState.from_url(primary.url, "job")  # without the option: acknowledged at once
            plain.admit("adm-3", {"staging": ["c"]}, ttl_ms=60_000)
            plain.close()
        finally:
            replica.stop()


@pytest.mark.parametrize(
    "query", ["wait_replicas=-1", "wait_replicas=x", "wait_timeout_ms=1000", "wait_for=1"]
)
def test_a_bad_replication_option_is_a_config_error(query: str) -> None:
    with pytest.raises(ConfigError, match=query.split("=")[0]) as caught:
        RedisState.from_url(f"redis://:pw@127.0.0.1:{free_port()}/0?{query}", "job")
    assert "pw" not in str(caught.value)


def test_each_live_admission_says_when_it_expires(state: StateStore, advance: Advance) -> None:
    """`tq-gc admissions` shows each admission's TTL and expiry, on the store's clock."""
    before_ms = state.now_ms()
    state.admit("short", {"staging": ["a"]}, ttl_ms=TTL_MS)
    state.admit("long", {"staging": ["b"]}, ttl_ms=60_000)
    expiries = state.admission_expiries()
    after_ms = state.now_ms()
    assert set(expiries) == {"short", "long"}
    assert before_ms + 60_000 <= expiries["long"] <= after_ms + 60_000
    assert before_ms + TTL_MS <= expiries["short"] <= after_ms + TTL_MS
    advance(PAST_TTL_S)
    assert set(state.admission_expiries()) == {"long"}
    state.release_admission("long")
    assert state.admission_expiries() == {}
