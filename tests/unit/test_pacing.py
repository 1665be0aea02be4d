"""Pacing of tq-gc's TQ requests (tq_gc/stores/transferqueue/pacing.py): the waits and window sizes it
computes, and the request stats a deferred row store passes on."""

from __future__ import annotations

import pytest

from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.stores.transferqueue.pacing import DeleteThrottle, Pacer


def pacer(window: int = 400, duty: float = 0.5) -> Pacer:
    return Pacer(window=window, min_window=100, max_window=1600, target_seconds=0.010, duty=duty)


@pytest.mark.parametrize(
    ("duty", "latency_seconds", "pause_seconds"),
    [(0.5, 0.004, 0.004), (0.25, 0.004, 0.012), (0.2, 0.010, 0.040), (1.0, 0.050, 0.0), (0.5, -1.0, 0.0)],
)
def test_the_duty_cycle_pauses_in_proportion_to_the_request(
    duty: float, latency_seconds: float, pause_seconds: float
) -> None:
    assert pacer(duty=duty).pause_after(latency_seconds) == pytest.approx(pause_seconds)


def test_a_slow_request_halves_the_window_down_to_its_floor() -> None:
    paced = pacer(window=400)
    windows = []
    for _ in range(4):
        paced.after(0.011)
        windows.append(paced.window)
    assert windows == [200, 100, 100, 100]


def test_a_fast_request_grows_the_window_by_a_quarter_up_to_its_ceiling() -> None:
    paced = pacer(window=1000)
    windows = []
    for _ in range(4):
        paced.after(0.004)
        windows.append(paced.window)
    assert windows == [1250, 1562, 1600, 1600]


def test_a_request_near_the_target_leaves_the_window_alone() -> None:
    paced = pacer(window=400)
    assert paced.after(0.007) == pytest.approx(0.007)
    assert paced.window == 400


def test_the_pause_grows_with_the_controllers_latency() -> None:
    paced = pacer()
    assert paced.after(0.002) < paced.after(0.020) < paced.after(0.200)


def test_starting_small_begins_at_half_and_may_go_to_a_quarter() -> None:
    paced = Pacer.starting_small(2000, target_seconds=0.01, duty=0.5)
    assert (paced.window, paced.min_window, paced.max_window) == (1000, 500, 2000)
    assert Pacer.starting_small(3, target_seconds=0.01, duty=0.5).window == 1


@pytest.mark.parametrize("duty", [0.0, -0.5, 1.5])
def test_a_duty_outside_zero_to_one_is_refused(duty: float) -> None:
    with pytest.raises(ValueError, match="duty"):
        pacer(duty=duty)


class CountingStore(MemoryRowStore):
    def __init__(self) -> None:
        super().__init__()
        self.stats: dict[str, list[float]] = {"kv_retrieve_keys": [0.001, 0.002]}

    def take_request_stats(self) -> dict[str, list[float]]:
        taken, self.stats = self.stats, {}
        return taken


def test_a_deferred_store_passes_on_its_stores_request_stats_once_attached() -> None:
    deferred = DeferredRowStore(CountingStore)
    assert deferred.take_request_stats() == {}  # not attached yet: nothing asked
    deferred.ensure_attached()
    assert deferred.take_request_stats() == {"kv_retrieve_keys": [0.001, 0.002]}
    assert deferred.take_request_stats() == {}


def test_a_deferred_store_over_a_store_that_keeps_no_stats_reports_none() -> None:
    deferred = DeferredRowStore(MemoryRowStore)
    deferred.ensure_attached()
    assert deferred.take_request_stats() == {}


def test_an_unthrottled_store_never_waits_before_a_delete_batch() -> None:
    throttle = DeleteThrottle(rows_per_second=0)
    throttle.let_through(10_000, now=5.0)

    assert throttle.wait_seconds(now=5.0) == 0.0


def test_the_first_delete_batch_goes_at_once_and_each_next_waits_what_the_one_before_needs() -> None:
    throttle = DeleteThrottle(rows_per_second=200)

    assert throttle.wait_seconds(now=10.0) == 0.0
    throttle.let_through(100, now=10.0)  # 100 rows at 200 a second: half a second
    assert throttle.wait_seconds(now=10.1) == pytest.approx(0.4)  # the re-check and the clear took 0.1 s
    assert throttle.wait_seconds(now=10.7) == 0.0  # slower than the throttle by itself: no wait


@pytest.mark.parametrize("work_seconds", [0.0, 0.1, 0.3, 2.0])
def test_delete_batches_let_through_keep_to_the_rate_whatever_their_own_work_takes(
    work_seconds: float,
) -> None:
    """Batches of 100 at 200 rows a second, each batch's own re-check and clear taking `work_seconds`:
    however long that is, the rows let through before any moment are at most the rate's since the
    first, plus the batch let through then."""
    throttle, now, let_through_at = DeleteThrottle(rows_per_second=200), 0.0, []
    for _ in range(20):
        now += throttle.wait_seconds(now)
        throttle.let_through(100, now)
        let_through_at.append(now)
        now += work_seconds
    for batches, at in enumerate(let_through_at, start=1):
        assert (batches - 1) * 100 <= at * 200 + 1e-6
    assert let_through_at[-1] == pytest.approx(19 * max(0.5, work_seconds))


@pytest.mark.parametrize("rows_per_second", [-1.0, float("nan")])
def test_a_negative_delete_rate_is_refused(rows_per_second: float) -> None:
    with pytest.raises(ValueError, match="rows_per_second"):
        DeleteThrottle(rows_per_second)
