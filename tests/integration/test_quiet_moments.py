"""Quiet moments of a real TQ controller (tq_gc/stores/transferqueue/quiet.py): the wait finds one on a
controller that serves nothing, finds none on one that serves requests back to back, and where it does
not fit the controller, warns once and waits no more."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from harness import wait_until

from tools.testbed.tuned_cli import JOB_NEVER_IDLE_MS
from tq_gc.config import TransferQueueConfig
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.key_windows import KeyWindows
from tq_gc.stores.transferqueue.pacing import FixedPacing
from tq_gc.stores.transferqueue.requests import TqRequests

pytestmark = pytest.mark.ray


@pytest.fixture
def controller_functions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each function the store runs on the controller through Ray, in order."""
    names: list[str] = []
    actor_call = TqRequests.actor_call

    def recording(self: TqRequests, op: str | None, what: str, actor: Any, method: str, *args: Any) -> Any:
        if method == "__ray_call__":
            names.append(args[0].__name__)
        return actor_call(self, op, what, actor, method, *args)

    monkeypatch.setattr(TqRequests, "actor_call", recording)
    return names


def test_a_controller_serving_nothing_has_a_quiet_moment(ray_cluster: Any, tq: Any) -> None:
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(quiet_ms=30, quiet_wait_max_ms=10_000)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        assert store.wait_for_quiet().found


def test_a_controller_serving_requests_back_to_back_has_none(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ["k"])
    stop, served = threading.Event(), []

    def job() -> None:  # a request as soon as the last one is answered
        client = tq.get_client()
        while not stop.is_set():
            served.append(client.kv_retrieve_meta(["k"], tq_partition, create=False).size)

    thread = threading.Thread(target=job)
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with TransferQueueRowStore.attach(
        config, fixed=FixedPacing(quiet_ms=2_000, quiet_wait_max_ms=4_000)
    ) as store:
        thread.start()
        try:
            # The requests are under way before the wait starts (a slow start would read as quiet).
            wait_until("the job's first request", lambda: served, timeout_seconds=30)
            busy = store.wait_for_quiet()
        finally:
            stop.set()
            thread.join()
        after = store.wait_for_quiet()

    assert served and not busy.found
    assert after.found  # the same wait, once the requests stop


def test_a_listing_waits_for_each_quiet_moment_in_the_same_call_as_the_read_it_waits_for(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, controller_functions: list[str]
) -> None:
    """A swept partition's listing reads the controller through Ray (index pages, key windows). Each of
    those calls waits for its quiet moment first, inside it: no call of the wait's own before it (a round
    trip more, on both sides), and the read starts as soon as the quiet moment is found. The request
    timings leave the wait out: they are how long tq-gc held the controller."""
    put_rows(tq_partition, [f"k{i}" for i in range(10)])
    quiet_seconds = 0.1
    # duty 1: no pauses, so the listing is its waits and its reads
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(
        quiet_ms=quiet_seconds * 1000, quiet_wait_max_ms=10_000, job_idle_ms=JOB_NEVER_IDLE_MS
    )
    windows = KeyWindows(size=4)
    with TransferQueueRowStore.attach(config, duty_cycle=1, key_windows=windows, fixed=fixed) as store:
        store.take_request_stats()
        controller_functions.clear()
        started = time.monotonic()
        listed = store.list_keys(tq_partition)
        seconds = time.monotonic() - started
        requests = store.take_request_stats()

    assert set(listed) == {f"k{i}" for i in range(10)}
    reads = len(requests["partition_index_page"]) + len(requests["partition_keys_window"])
    assert len(requests["partition_keys_window"]) == 3
    assert len(controller_functions) == reads, controller_functions  # no call for the wait alone
    # Each read waited at least quiet_seconds (the controller is idle), and its timing is the rest of its
    # call:
    # together they fit in the listing's time. A timing that counted its wait would not.
    held = sum(sum(timings) for timings in requests.values())
    assert held + reads * quiet_seconds <= seconds, (held, reads, seconds)


def test_the_store_says_how_long_it_waited_for_quiet_moments_and_paused_for_its_duty_cycle(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """The pacing's own time is told apart from the requests' (take_pacing_stats): on an idle
    controller each read waits its quiet time, and at duty 0.5 pauses as long as it held the
    controller. Together with the requests, it is the listing's time, or less."""
    put_rows(tq_partition, [f"k{i}" for i in range(10)])
    quiet_seconds = 0.1
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(
        quiet_ms=quiet_seconds * 1000, quiet_wait_max_ms=10_000, job_idle_ms=JOB_NEVER_IDLE_MS
    )
    windows = KeyWindows(size=4)
    with TransferQueueRowStore.attach(config, duty_cycle=0.5, key_windows=windows, fixed=fixed) as store:
        store.take_request_stats()
        store.take_pacing_stats()
        started = time.monotonic()
        store.list_keys(tq_partition)
        seconds = time.monotonic() - started
        requests = store.take_request_stats()
        pacing = store.take_pacing_stats()
        assert store.take_pacing_stats() == {}  # taken: afresh

    reads = len(requests["partition_index_page"]) + len(requests["partition_keys_window"])
    held = sum(sum(timings) for timings in requests.values())
    assert pacing["quiet_wait"] >= reads * quiet_seconds, (pacing, reads)
    assert pacing["duty_pause"] > 0
    assert held + pacing["quiet_wait"] + pacing["duty_pause"] <= seconds, (held, pacing, seconds)


@pytest.mark.parametrize("first", ["waits", "listing"])
def test_a_controller_the_wait_does_not_fit_gets_requests_at_once_and_one_warning(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    caplog: pytest.LogCaptureFixture,
    controller_functions: list[str],
    first: str,
) -> None:
    """The wait reads which function TQ's request thread is in; another TQ version may have no such
    thread: one warning, then no more waiting (and no more calls to the controller for it), whether a
    wait of its own or one inside a listing's read finds that out first."""
    put_rows(tq_partition, [f"k{i}" for i in range(5)])

    def misfit() -> Any:
        def wait(
            controller: Any, quiet_seconds: float, max_wait_seconds: float, sample_seconds: float
        ) -> tuple[float, bool]:
            return controller.no_request_thread.ident, True

        return wait

    config = TransferQueueConfig(ray_address=ray_cluster.address)
    logger = "tq_gc.stores.transferqueue.quiet"
    store = TransferQueueRowStore.attach(config, request_thread_watch=misfit(), fixed=FixedPacing(batch=2))
    with store, caplog.at_level("WARNING", logger=logger):
        if first == "listing":
            listed = store.list_keys(tq_partition)
        calls_before_waits = len(controller_functions)
        waits = [store.wait_for_quiet() for _ in range(3)]
        calls_by_waits = len(controller_functions) - calls_before_waits
        if first == "waits":
            listed = store.list_keys(tq_partition)
        delete_batches = [len(b) for b in store.delete_batches(tq_partition, list(listed))]

    assert not any(wait.found for wait in waits)
    assert calls_by_waits == (1 if first == "waits" else 0)  # the first finds out, then no more
    assert set(listed) == {f"k{i}" for i in range(5)}
    warnings = [r.getMessage() for r in caplog.records if r.name == logger]
    assert len(warnings) == 1 and "quiet moment" in warnings[0], warnings
    assert delete_batches == [2, 2, 1]  # whole request batches: no quiet moment to fit in


@pytest.mark.parametrize(("quiet_ms", "rows"), [(20, 500), (0, 2000)])
def test_clears_fit_in_a_quiet_moment_while_requests_wait_for_one(
    ray_cluster: Any, tq: Any, tq_partition: str, quiet_ms: float, rows: int
) -> None:
    """The store's delete batches: request_batch/4 rows while requests wait for quiet moments (a re-check
    and clear that fit in what is left of one), else request_batch."""
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    keys = [f"k{i}" for i in range(2 * rows + 1)]
    fixed = FixedPacing(batch=2000, quiet_ms=quiet_ms, job_idle_ms=JOB_NEVER_IDLE_MS)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        sizes = [len(batch) for batch in store.delete_batches(tq_partition, keys)]
    assert sizes == [rows, rows, 1]


def test_while_requests_wait_for_quiet_moments_even_a_small_partition_is_read_in_pages(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """One copy of a small partition's index set (get_partition_index_range) holds the controller's GIL
    5-20 ms at 100k rows: too long for what is left of a quiet moment, where pages of the index space
    hold it ~0.5 ms each."""
    put_rows(tq_partition, [f"k{i}" for i in range(10)])
    listed = {}
    for quiet_ms in (20, 0):
        config = TransferQueueConfig(ray_address=ray_cluster.address)
        with TransferQueueRowStore.attach(config, fixed=FixedPacing(quiet_ms=quiet_ms)) as store:
            store.take_request_stats()
            keys = store.list_keys(tq_partition)
            listed[quiet_ms] = (keys, store.take_request_stats())

    (quiet_keys, quiet_requests), (keys, requests) = listed[20], listed[0]
    assert quiet_keys == keys and set(keys) == {f"k{i}" for i in range(10)}
    assert "get_partition_index_range" not in quiet_requests
    assert len(quiet_requests["partition_index_page"]) >= 2  # the size, then the pages
    assert len(requests["get_partition_index_range"]) == 1  # without the wait: one copy


def _wait_until_the_job_is_idle(store: TransferQueueRowStore, deadline_seconds: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_seconds
    while not store.wait_for_quiet().job_idle:
        assert time.monotonic() < deadline, "the wait never found the job idle"


def test_a_job_idle_for_a_while_is_found_so_and_the_stores_own_requests_leave_it_idle(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """A job that has made no request for job_idle_ms is idle: the wait says so. tq-gc's own requests
    (a re-check, a listing) go through the same request thread and do not end the job's idleness."""
    put_rows(tq_partition, [f"k{i}" for i in range(10)])
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(quiet_ms=20, quiet_wait_max_ms=10_000, job_idle_ms=100)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        _wait_until_the_job_is_idle(store)
        store.identities(tq_partition, ["k1", "k2"])
        assert store.wait_for_quiet().job_idle
        store.list_keys(tq_partition)
        assert store.wait_for_quiet().job_idle


def test_a_request_of_the_jobs_ends_its_idleness(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """The job's first request after an idle spell: the next wait no longer finds the job idle, and it
    waits for a quiet moment again."""
    put_rows(tq_partition, ["k"])
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(quiet_ms=20, quiet_wait_max_ms=10_000, job_idle_ms=100)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        _wait_until_the_job_is_idle(store)
        tq.get_client().kv_retrieve_meta(["k"], tq_partition, create=False)  # the job's request
        wait = store.wait_for_quiet()
        assert wait.found and not wait.job_idle


def test_while_the_job_is_idle_deletes_go_in_whole_batches_with_no_duty_pause(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """The naive clear's pace when nobody else uses the controller: batches of request_batch (not a
    quarter of it), and no duty cycle's pause after them. A busy job gets quarter batches (the
    test above with quiet moments)."""
    keys = [f"k{i}" for i in range(40)]
    put_rows(tq_partition, keys)
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(batch=8, quiet_ms=20, quiet_wait_max_ms=10_000, job_idle_ms=100)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        expected = store.identities(tq_partition, keys)
        _wait_until_the_job_is_idle(store)
        store.take_pacing_stats()
        sizes = []
        for batch in store.delete_batches(tq_partition, keys):
            sizes.append(len(batch))
            store.delete_if_unchanged(tq_partition, {key: expected[key] for key in batch})
        pacing = store.take_pacing_stats()
        assert sizes == [8] * 5
        assert pacing.get("duty_pause", 0.0) == 0.0, pacing
        assert store.list_keys(tq_partition) == {}
