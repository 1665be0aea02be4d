"""The publisher API (AdmissionRegistry) and the collector's view of it (AdmissionsSource), both backends."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.testbed.redis_server import RedisServer
from tq_gc.errors import ConfigError, ReferenceSourceError, StoreUnavailable
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.state import RedisState, StateStore
from tq_gc.state import redis_barrier as redis_state

Advance = Callable[[float], None]
ROWS = {"rollout_staging": ["r7_g0_a1/call3", "r7_g0_a1/call4"]}


def test_admit_renew_release(state: StateStore) -> None:
    reg = AdmissionRegistry(state)
    reg.admit("adm-1", rows=ROWS, ttl_seconds=600)
    assert reg.live() == {"adm-1": ROWS}

    assert reg.renew("adm-1", ttl_seconds=600) is True
    reg.release("adm-1")
    assert reg.live() == {}
    assert reg.renew("adm-1", ttl_seconds=600) is False


def test_expired_admissions_are_not_live(state: StateStore, advance: Advance) -> None:
    reg = AdmissionRegistry(state)
    reg.admit("dying", rows=ROWS, ttl_seconds=0.2)
    reg.admit("alive", rows={"p": ["k"]}, ttl_seconds=600)
    advance(0.35)

    assert reg.live() == {"alive": {"p": ["k"]}}
    assert reg.renew("dying", ttl_seconds=600) is False


def test_admission_block_holds_rows_then_releases(state: StateStore) -> None:
    reg = AdmissionRegistry(state)
    with reg.admission("adm-2", rows=ROWS, ttl_seconds=600) as admission_id:
        assert admission_id == "adm-2"
        assert reg.live() == {"adm-2": ROWS}
    assert reg.live() == {}


def test_admission_block_releases_when_it_raises(state: StateStore) -> None:
    reg = AdmissionRegistry(state)
    with pytest.raises(RuntimeError, match="rollout failed"), reg.admission("adm", ROWS, ttl_seconds=600):
        raise RuntimeError("rollout failed")
    assert reg.live() == {}


def test_a_failed_release_does_not_hide_the_blocks_error() -> None:
    with RedisServer() as server:
        reg = AdmissionRegistry.connect(server.url, namespace="job")
        with pytest.raises(RuntimeError, match="rollout failed"), reg.admission("adm", ROWS, 600):
            server.stop()
            raise RuntimeError("rollout failed")
        reg.close()


def test_fences(state: StateStore, advance: Advance) -> None:
    reg = AdmissionRegistry(state)
    reg.fence("checkpoint-7", ttl_seconds=300)
    reg.fence("brief", ttl_seconds=1.5)
    assert set(reg.fences()) == {"checkpoint-7", "brief"}
    assert reg.fences()["checkpoint-7"] > state.now_ms()

    advance(2.0)
    assert set(reg.fences()) == {"checkpoint-7"}
    reg.unfence("checkpoint-7")
    assert reg.fences() == {}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.admit("", ROWS, 60), "admission_id must be a non-empty string"),
        (lambda r: r.admit("a", ROWS, 0), "ttl_seconds must be positive"),
        (lambda r: r.admit("a", ROWS, -1), "ttl_seconds must be positive"),
        (lambda r: r.admit("a", ROWS, float("inf")), "ttl_seconds must be positive and finite"),
        (lambda r: r.admit("a", ROWS, "600"), "ttl_seconds must be a number"),
        (lambda r: r.admit("a", {"p": "k1"}, 60), r"rows\['p'\] must be a list of keys"),
        (lambda r: r.admit("a", {"p": ["k", 3]}, 60), "every key must be a non-empty string"),
        (lambda r: r.admit("a", {"": ["k"]}, 60), "partition names must be non-empty"),
        (lambda r: r.admit("a", ["p", "k"], 60), "rows must be a mapping"),
        (lambda r: r.renew("a", 0), "ttl_seconds must be positive"),
        (lambda r: r.release(""), "admission_id must be a non-empty string"),
        (lambda r: r.fence("", 60), "fence name must be a non-empty string"),
        (lambda r: r.fence("f", 0), "ttl_seconds must be positive"),
    ],
)
def test_bad_input_is_refused_clearly(
    state: StateStore, call: Callable[[AdmissionRegistry], Any], message: str
) -> None:
    reg = AdmissionRegistry(state)
    with pytest.raises(ValueError, match=message):
        call(reg)
    assert reg.live() == {}


def test_tuples_of_keys_are_accepted(state: StateStore) -> None:
    reg = AdmissionRegistry(state)
    reg.admit("a", {"p": ("k1", "k2")}, ttl_seconds=60)
    assert reg.live() == {"a": {"p": ["k1", "k2"]}}


def test_connect_to_redis_and_close(redis_url: str) -> None:
    with AdmissionRegistry.connect(redis_url, namespace="job-42") as reg:
        reg.admit("adm-1", ROWS, ttl_seconds=600)
    with AdmissionRegistry.connect(redis_url, namespace="job-42") as again:
        assert again.live() == {"adm-1": ROWS}
    with AdmissionRegistry.connect(redis_url, namespace="job-43") as other_job:
        assert other_job.live() == {}


def test_connect_refuses_a_process_local_memory_registry() -> None:
    with pytest.raises(ConfigError, match="sidecar"):
        AdmissionRegistry.connect("memory://", namespace="job")


class CountingRedis(redis.Redis):
    closed = 0

    def close(self) -> None:
        self.closed += 1
        super().close()


def test_close_leaves_a_backend_it_was_handed_open(redis_url: str) -> None:
    client = CountingRedis.from_url(redis_url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    state = RedisState(client, "job", owns_client=True)
    AdmissionRegistry(state).close()
    assert client.closed == 0
    state.close()
    assert client.closed == 1


# AdmissionsSource: what the collector reads ---------------------------------------------------------


def test_source_reads_every_live_row(state: StateStore, advance: Advance) -> None:
    reg = AdmissionRegistry(state)
    reg.admit("a", {"staging": ["k1", "k2"]}, ttl_seconds=600)
    reg.admit("b", {"staging": ["k2"], "other": ["k3"]}, ttl_seconds=600)
    reg.admit("expiring", {"staging": ["k4"]}, ttl_seconds=0.2)
    advance(0.35)

    source = AdmissionsSource(state, expect_nonempty=True)
    assert source.name == "admissions"
    assert source.read() == {"staging": {"k1", "k2"}, "other": {"k3"}}


def test_source_empty_is_fine_unless_expected_nonempty(state: StateStore) -> None:
    assert AdmissionsSource(state, expect_nonempty=False).read() == {}
    with pytest.raises(ReferenceSourceError, match="expect_nonempty"):
        AdmissionsSource(state, expect_nonempty=True).read()


def test_source_fails_closed_when_the_store_fails() -> None:
    with RedisServer() as server:
        state = RedisState.from_url(server.url, "job")
        source = AdmissionsSource(state, expect_nonempty=False)
        AdmissionRegistry(state).admit("a", ROWS, ttl_seconds=600)
        assert source.read() == {partition: set(keys) for partition, keys in ROWS.items()}
        server.stop()

        with pytest.raises(ReferenceSourceError, match="admissions") as caught:
            source.read()
        assert isinstance(caught.value.__cause__, StoreUnavailable)
        state.close()


def test_reread_reuses_the_snapshot_until_an_admission_is_recorded(state: StateStore) -> None:
    registry = AdmissionRegistry(state)
    source = AdmissionsSource(state)
    registry.admit("a", {"staging": ["k1"]}, ttl_seconds=600)
    assert source.read() == {"staging": {"k1"}}
    registry.release("a")
    # Released since: the old snapshot still protects k1, which errs on the safe side.
    assert source.reread() == {"staging": {"k1"}}
    registry.admit("b", {"staging": ["k2"]}, ttl_seconds=600)
    assert source.reread() == {"staging": {"k2"}}


def test_a_source_reads_the_same_snapshot_again_without_rebuilding_it(state: StateStore) -> None:
    registry = AdmissionRegistry(state)
    registry.admit("a", {"staging": ["k1", "k2"]}, ttl_seconds=600)
    registry.admit("b", {"other": ["k3"]}, ttl_seconds=600)
    source = AdmissionsSource(state)
    first = source.read()

    registry.admit("c", {"staging": ["k4"]}, ttl_seconds=600)
    second = source.read()
    assert second == {"staging": {"k1", "k2", "k4"}, "other": {"k3"}}
    assert second["other"] is first["other"], "a partition no admission came to or left is not rebuilt"
    registry.release("a")
    assert source.read() == {"staging": {"k4"}, "other": {"k3"}}


def test_live_admissions_are_the_callers_to_change(state: StateStore) -> None:
    state.admit("a", {"staging": ["k1"]}, 600_000)
    live = state.live_admissions()
    live["a"]["staging"].append("k-added-by-the-caller")
    live["a"]["other"] = ["k2"]
    assert state.live_admissions() == {"a": {"staging": ["k1"]}}


def held_by(live: dict[str, dict[str, list[str]]]) -> dict[str, set[str]]:
    """{partition: keys} the admissions hold, worked out afresh."""
    held: dict[str, set[str]] = {}
    for rows in live.values():
        for partition, keys in rows.items():
            held.setdefault(partition, set()).update(keys)
    return {partition: keys for partition, keys in held.items() if keys}


ADMISSION_IDS = ("a", "b", "c")
ADMISSION_ROWS = st.dictionaries(
    st.sampled_from(["staging", "other"]),
    st.lists(st.sampled_from(["k1", "k2", "k3"]), max_size=3),
    max_size=2,
)
ADMISSION_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.sampled_from(ADMISSION_IDS), ADMISSION_ROWS),
        st.tuples(st.just("release"), st.sampled_from(ADMISSION_IDS)),
        st.tuples(st.just("read")),
    ),
    max_size=16,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ADMISSION_STEPS)
def test_a_source_that_keeps_what_it_read_reads_what_the_live_admissions_hold(
    state: StateStore, steps: list[tuple[Any, ...]]
) -> None:
    """Admissions made, replaced and released between reads, several at a time: the source that keeps
    its last read (and the store that keeps what it decoded) must read what the live admissions hold."""
    prefix = uuid.uuid4().hex  # examples share the store
    registry = AdmissionRegistry(state)
    keeping = AdmissionsSource(state)
    try:
        for op, *args in [*steps, ("read",)]:
            if op == "admit":
                registry.admit(f"{prefix}-{args[0]}", args[1], ttl_seconds=600)
            elif op == "release":
                registry.release(f"{prefix}-{args[0]}")
            else:
                assert keeping.read() == held_by(state.live_admissions())
    finally:
        for admission_id in ADMISSION_IDS:
            registry.release(f"{prefix}-{admission_id}")


def test_redis_decodes_only_the_admissions_made_or_replaced_since_its_last_read(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []
    decode = redis_state.decoded_rows

    def decoded_counted(document: str) -> dict[str, list[str]]:
        decoded.append(document)
        return decode(document)

    monkeypatch.setattr(redis_state, "decoded_rows", decoded_counted)
    state = RedisState.from_url(redis_url, "job")
    try:
        state.admit("a", {"staging": ["k1"]}, 600_000)
        state.admit("b", {"staging": ["k2"]}, 600_000)
        assert state.live_admissions() == {"a": {"staging": ["k1"]}, "b": {"staging": ["k2"]}}
        assert len(decoded) == 2

        state.admit("b", {"staging": ["k3"]}, 600_000)
        state.admit("c", {"other": ["k4"]}, 600_000)
        decoded.clear()
        live = state.live_admissions()
        assert live == {"a": {"staging": ["k1"]}, "b": {"staging": ["k3"]}, "c": {"other": ["k4"]}}
        assert sorted(decoded) == sorted(['{"staging": ["k3"]}', '{"other": ["k4"]}'])
    finally:
        state.close()


def test_the_rows_read_to_share_are_the_stores_own_and_the_same_as_live(state: StateStore) -> None:
    state.admit("a", {"staging": ["k1", "k2"]}, 600_000)
    state.admit("b", {"other": ["k3"]}, 600_000)
    shared = state.live_admission_rows()
    assert shared == state.live_admissions()
    again = state.live_admission_rows()
    assert again["a"] is shared["a"], "read to share: not copied"
    state.admit("a", {"staging": ["k4"]}, 600_000)
    assert state.live_admission_rows()["a"] == {"staging": ["k4"]}
    assert shared["a"] == {"staging": ["k1", "k2"]}, "what was shared is never changed afterwards"


def test_two_holders_of_one_admission_id_each_hold_their_own_rows(state: StateStore) -> None:
    """Two workers holding `call-0` at once: neither replaces nor releases the other's rows."""
    worker_a, worker_b = AdmissionRegistry(state), AdmissionRegistry(state)
    worker_a.admit("call-0", {"p": ["a1"]}, ttl_seconds=600)
    worker_b.admit("call-0", {"p": ["b1"]}, ttl_seconds=600)
    assert worker_a.live() == {"call-0": {"p": ["a1", "b1"]}} or worker_a.live() == {
        "call-0": {"p": ["b1", "a1"]}
    }
    assert AdmissionsSource(state, False).read() == {"p": {"a1", "b1"}}
    worker_a.release("call-0")
    assert worker_b.live() == {"call-0": {"p": ["b1"]}}
    assert worker_a.renew("call-0", ttl_seconds=600) is False  # worker_a's is gone, worker_b's stays
    assert worker_b.renew("call-0", ttl_seconds=600) is True


def test_a_fence_two_holders_raised_stays_up_until_the_last_lowers_it(state: StateStore) -> None:
    """Two ranks fencing `ckpt-7`: the first to finish does not lower the other's fence."""
    rank_0, rank_1 = AdmissionRegistry(state), AdmissionRegistry(state)
    with rank_0.checkpoint_fence("ckpt-7"):
        with rank_1.checkpoint_fence("ckpt-7"):
            assert set(rank_0.fences()) == {"ckpt-7"}
        assert set(rank_1.fences()) == {"ckpt-7"}  # rank 0's checkpoint still runs
        assert state.live_fences()  # and the sweepers see it up
    assert rank_0.fences() == {} and state.live_fences() == {}
