"""The trainer kit (tq_gc.publish.client.GcClient) and the checkpoint fence that waits, on real stores."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import redis

from tools.testbed.redis_server import RedisServer
from tq_gc.config.models import MIN_GRACE_SECONDS
from tq_gc.errors import StoreUnavailable
from tq_gc.publish.client import DEFAULT_TTL_SECONDS, GcClient
from tq_gc.publish.registry import RENEW_MAX_SECONDS, AdmissionRegistry
from tq_gc.report import Cause, Outcome, SweepReport
from tq_gc.rows import Identity
from tq_gc.state import MemoryState, RedisState, StateStore
from tq_gc.sweep import Collector

from support.baseline import with_old_baseline
from support.world import STAGING, World

WAIT_S = 10.0


def wait_until(what: str, condition: object, seconds: float = WAIT_S) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def test_holding_admits_before_the_block_and_releases_after(state: StateStore) -> None:
    registry = AdmissionRegistry(state)
    with GcClient(registry) as gc:
        with gc.holding("call-1", {STAGING: ["r1/c1", "r1/c0"]}):
            assert registry.live() == {"call-1": {STAGING: ["r1/c1", "r1/c0"]}}
        assert registry.live() == {}
        with pytest.raises(RuntimeError), gc.holding("call-2", {STAGING: ["r2/c1"]}):
            raise RuntimeError("the call failed")
        assert registry.live() == {}


def test_a_long_call_is_renewed_past_its_ttl(redis_url: str) -> None:
    with GcClient.connect(redis_url, "job", ttl_seconds=1.5) as gc, gc.holding("long-call", {STAGING: ["k"]}):
        time.sleep(4.0)  # more than two TTLs; renewals every 0.5 s leave a second to spare
        assert set(AdmissionRegistry.connect(redis_url, "job").live()) == {"long-call"}


def test_an_admission_the_registry_lost_is_admitted_again(redis_url: str) -> None:
    reader = AdmissionRegistry.connect(redis_url, "job")
    with GcClient.connect(redis_url, "job", ttl_seconds=0.6) as gc, gc.holding("call", {STAGING: ["k"]}):
        client = redis.Redis.from_url(redis_url)
        client.flushall()  # Redis restarted empty (the renewer may admit it again at any moment from here)
        client.close()
        wait_until("the renewer admitted the call again", lambda: reader.live() == {"call": {STAGING: ["k"]}})
    assert reader.live() == {}
    reader.close()


def test_with_a_long_ttl_a_lost_admission_is_back_well_within_the_shortest_grace(redis_url: str) -> None:
    """The default TTL (600 s) renewed at a third of it would leave a lost admission out for 200 s, more
    than three times the shortest grace (60 s): renewals come at least every RENEW_MAX_SECONDS."""
    assert RENEW_MAX_SECONDS * 3 <= MIN_GRACE_SECONDS and DEFAULT_TTL_SECONDS >= 3 * MIN_GRACE_SECONDS
    reader = AdmissionRegistry.connect(redis_url, "job")
    with GcClient.connect(redis_url, "job") as gc, gc.holding("call", {STAGING: ["k"]}):
        client = redis.Redis.from_url(redis_url)
        client.flushall()  # Redis restarted empty
        client.close()
        wait_until(
            "the renewer admitted the call again",
            lambda: reader.live() == {"call": {STAGING: ["k"]}},
            seconds=RENEW_MAX_SECONDS + WAIT_S,
        )
    reader.close()


def test_a_shorter_renewal_period_can_be_asked_for(redis_url: str) -> None:
    reader = AdmissionRegistry.connect(redis_url, "job")
    with GcClient.connect(redis_url, "job", renew_seconds=0.2) as gc, gc.holding("call", {STAGING: ["k"]}):
        assert gc.renew_seconds == 0.2
        client = redis.Redis.from_url(redis_url)
        client.flushall()
        client.close()
        wait_until("the renewer admitted the call again", lambda: reader.live() == {"call": {STAGING: ["k"]}})
    reader.close()


@pytest.mark.parametrize("renew_seconds", [0, -1, float("inf"), float("nan"), 600.0])
def test_a_renewal_period_that_cannot_keep_the_admissions_alive_is_refused(
    redis_url: str, renew_seconds: float
) -> None:
    with pytest.raises(ValueError, match="renew_seconds"):
        GcClient.connect(redis_url, "job", ttl_seconds=600, renew_seconds=renew_seconds)


# One id, one block ---------------------------------------------------------------------------------


def test_a_nested_block_with_an_id_already_held_is_refused_and_the_outer_one_keeps_its_rows(
    state: StateStore,
) -> None:
    registry = AdmissionRegistry(state)
    with GcClient(registry) as gc:
        with gc.holding("call-1", {STAGING: ["outer"]}):
            with (
                pytest.raises(ValueError, match="'call-1' is already held"),
                gc.holding("call-1", {STAGING: ["inner"]}),
            ):
                pytest.fail("the nested block ran")
            assert registry.live() == {"call-1": {STAGING: ["outer"]}}, "the outer block's rows stay held"
            with gc.holding("call-2", {STAGING: ["inner"]}):  # another id nests as before
                assert set(registry.live()) == {"call-1", "call-2"}
            assert registry.live() == {"call-1": {STAGING: ["outer"]}}
        assert registry.live() == {}
        with gc.holding("call-1", {STAGING: ["again"]}):  # once released, the id may be held again
            assert registry.live() == {"call-1": {STAGING: ["again"]}}


def test_another_thread_cannot_hold_an_id_this_client_holds(state: StateStore) -> None:
    registry = AdmissionRegistry(state)
    errors: list[BaseException] = []

    def hold_the_same_id() -> None:
        try:
            with gc.holding("call-1", {STAGING: ["other"]}):
                pass
        except ValueError as exc:
            errors.append(exc)

    with GcClient(registry) as gc, gc.holding("call-1", {STAGING: ["mine"]}):
        other = threading.Thread(target=hold_the_same_id)
        other.start()
        other.join(WAIT_S)
        assert [type(exc) for exc in errors] == [ValueError]
        assert registry.live() == {"call-1": {STAGING: ["mine"]}}


@pytest.mark.parametrize("through", ["registry", "gc client"])
def test_a_nested_fence_with_a_name_already_up_is_refused_and_the_outer_one_stays(
    state: StateStore, through: str
) -> None:
    registry = AdmissionRegistry(state)
    with GcClient(registry) as gc:
        fencer = registry if through == "registry" else gc
        with fencer.checkpoint_fence("ckpt-7"):
            with pytest.raises(ValueError, match="'ckpt-7' is already up"), fencer.checkpoint_fence("ckpt-7"):
                pytest.fail("the nested block ran")
            assert set(registry.fences()) == {"ckpt-7"}, "the outer checkpoint stays fenced"
            with fencer.checkpoint_fence("ckpt-8"):
                assert set(registry.fences()) == {"ckpt-7", "ckpt-8"}
            assert set(registry.fences()) == {"ckpt-7"}
        assert registry.fences() == {}
        with fencer.checkpoint_fence("ckpt-7"):
            assert set(registry.fences()) == {"ckpt-7"}


# The store down: the job goes on, and what it holds is written as soon as the store is back ---------


def test_holding_goes_on_while_redis_is_down_and_is_admitted_as_soon_as_it_is_back() -> None:
    server = RedisServer().start()
    port = server.port
    gc = GcClient.connect(server.url, "job")
    try:
        server.stop()  # the collector's store is down: the job's calls go on
        with gc.holding("call-1", {STAGING: ["k1"]}):
            with gc.holding("call-2", {STAGING: ["k2"]}):
                pass  # begun and ended while Redis is down: nothing to write, nothing raised
            ran_while_down = True
            server = RedisServer(port).start()  # back, empty
            reader = AdmissionRegistry.connect(server.url, "job")
            wait_until(
                "the pending admission was written", lambda: reader.live() == {"call-1": {STAGING: ["k1"]}}
            )
        assert ran_while_down
        assert reader.live() == {}, "released once its block ended"
        reader.close()
    finally:
        gc.close()
        server.stop()


def test_a_checkpoint_goes_on_while_redis_is_down_and_is_fenced_as_soon_as_it_is_back(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.rows.put(STAGING, "r1/c")
    server = RedisServer().start()
    port = server.port
    gc = GcClient.connect(server.url, "job-42")
    try:
        server.stop()
        with gc.checkpoint_fence("ckpt-9"):
            server = RedisServer(port).start()
            reader = AdmissionRegistry.connect(server.url, "job-42")
            wait_until("the pending fence was raised", lambda: "ckpt-9" in reader.fences())
            state = RedisState.from_url(server.url, "job-42")
            report = Collector(world.config, state, world.rows).sweep(dry_run=False)
            assert (report.outcome, report.cause) == (Outcome.SKIPPED, Cause.FENCE_UP)
            state.close()
        assert reader.fences() == {}, "lowered once the checkpoint ended"
        reader.close()
    finally:
        gc.close()
        server.stop()


def test_a_lost_admission_is_readmitted_while_other_blocks_begin_and_end(redis_url: str) -> None:
    reader = AdmissionRegistry.connect(redis_url, "job")
    with GcClient.connect(redis_url, "job", ttl_seconds=0.6) as gc, gc.holding("long", {STAGING: ["k"]}):
        client = redis.Redis.from_url(redis_url)
        for call in range(50):
            if call % 10 == 0:
                client.flushall()
            with gc.holding(f"call-{call}", {STAGING: [f"c{call}"]}):
                assert reader.live()[f"call-{call}"] == {STAGING: [f"c{call}"]}
        client.close()
        wait_until("the long call was admitted again", lambda: reader.live() == {"long": {STAGING: ["k"]}})
    assert reader.live() == {}
    reader.close()


def test_the_registrys_own_fence_still_raises_when_the_store_is_down() -> None:
    with RedisServer() as server:
        registry = AdmissionRegistry.connect(server.url, "job")
        server.stop()
        with pytest.raises(StoreUnavailable), registry.checkpoint_fence("ckpt"):
            pytest.fail("the checkpoint ran unfenced")
        registry.close()


class SlowClearWorld(World):
    """A world whose clear blocks until the test lets it finish, recording what happens when."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path, delete_batch_rows=1, limits={"max_delete_fraction": 1.0})
        self.events: list[str] = []
        self.clearing = threading.Event()
        self.finish_clear = threading.Event()
        real_delete = self.rows.delete_if_unchanged

        def slow_delete(partition: str, expected: Mapping[str, Identity]) -> set[str]:
            self.events.append("clear started")
            self.clearing.set()
            assert self.finish_clear.wait(WAIT_S)
            deleted = real_delete(partition, expected)
            self.events.append("clear finished")
            return deleted

        self.rows.delete_if_unchanged = slow_delete  # type: ignore[method-assign]


def test_the_checkpoint_fence_waits_for_a_delete_batch_in_flight(tmp_path: Path) -> None:
    world = SlowClearWorld(tmp_path)
    world.state = with_old_baseline(MemoryState("job-42"))  # real clock: sweeper, trainer side by side
    world.registry = AdmissionRegistry(world.state)
    for key in ("r1/c", "r2/c"):
        world.rows.put(STAGING, key)
    Collector(world.config, world.state, world.rows).sweep(dry_run=True)
    first_seen = world.state.load_first_seen(STAGING)
    past = {key: record._replace(at_ms=record.at_ms - 61_000) for key, record in first_seen.items()}
    lease = world.state.acquire_lease("setup", 60_000)
    assert lease is not None
    world.state.save_first_seen(lease, STAGING, past, [], observed_ms=world.state.now_ms())
    world.state.release_lease(lease)

    reports: list[SweepReport] = []
    sweeper = threading.Thread(target=lambda: reports.append(world.sweep()))
    sweeper.start()
    assert world.clearing.wait(WAIT_S)

    def checkpoint() -> None:
        with GcClient(world.registry) as gc, gc.checkpoint_fence("ckpt-7"):
            world.events.append("checkpoint runs")

    trainer = threading.Thread(target=checkpoint)
    trainer.start()
    wait_until("the fence is up", world.state.live_fences)
    trainer.join(0.3)
    assert trainer.is_alive(), "the fence returned while a delete batch was clearing"
    world.finish_clear.set()
    trainer.join(WAIT_S)
    sweeper.join(WAIT_S)

    assert world.events == ["clear started", "clear finished", "checkpoint runs"]
    [report] = reports
    # The second batch met the fence (still up, or come and gone): one row deleted, then the sweep stopped.
    assert (report.outcome, report.counts.deleted) == (Outcome.SKIPPED, 1)
    assert report.cause in (Cause.FENCE_UP, Cause.FENCE_RAISED)
    assert len(world.staging()) == 1


# A fence lasts as long as its block ------------------------------------------------------------------

FENCE_TTL_S = 1.5  # renewed every 0.5 s: a busy 2-core machine may hold a renewal up for a second


def test_a_checkpoint_longer_than_its_fence_ttl_stays_fenced_and_sweeps_skip(
    tmp_path: Path, redis_url: str
) -> None:
    world = World(tmp_path)
    world.rows.put(STAGING, "r1/c")
    state = RedisState.from_url(redis_url, "job-42")
    registry = AdmissionRegistry.connect(redis_url, "job-42")
    with registry.checkpoint_fence("ckpt-7", ttl_seconds=FENCE_TTL_S):
        ends = time.monotonic() + 3 * FENCE_TTL_S  # the checkpoint outlasts its fence's TTL three times
        while time.monotonic() < ends:
            assert "ckpt-7" in registry.fences(), "the fence lapsed while its checkpoint was running"
            time.sleep(0.05)
        report = Collector(world.config, state, world.rows).sweep(dry_run=False)
        assert (report.outcome, report.cause) == (Outcome.SKIPPED, Cause.FENCE_UP)
    assert registry.fences() == {}
    registry.close()
    state.close()


def test_the_gc_clients_fence_is_renewed_too(redis_url: str) -> None:
    with GcClient.connect(redis_url, "job-42") as gc, gc.checkpoint_fence("ckpt-8", ttl_seconds=FENCE_TTL_S):
        reader = AdmissionRegistry.connect(redis_url, "job-42")
        ends = time.monotonic() + 3 * FENCE_TTL_S
        while time.monotonic() < ends:
            assert "ckpt-8" in reader.fences()
            time.sleep(0.05)
        reader.close()


HOLD_A_FENCE_FOREVER = """
import sys, time
from tq_gc.publish.registry import RENEW_MAX_SECONDS, AdmissionRegistry
registry = AdmissionRegistry.connect(sys.argv[1], "job-42")
with registry.checkpoint_fence("ckpt-crashed", ttl_seconds=float(sys.argv[2])):
    print("fenced", flush=True)
    time.sleep(3600)
"""


def test_the_fence_of_a_holder_that_crashed_expires_after_its_ttl(redis_url: str) -> None:
    registry = AdmissionRegistry.connect(redis_url, "job-42")
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_A_FENCE_FOREVER, redis_url, str(FENCE_TTL_S)],
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "fenced\n"
            time.sleep(2 * FENCE_TTL_S)
            assert "ckpt-crashed" in registry.fences(), "renewed while its holder lives"
        finally:
            holder.kill()  # SIGKILL: no exit handler lowers the fence
    wait_until("the crashed holder's fence expired", lambda: registry.fences() == {})
    registry.close()
