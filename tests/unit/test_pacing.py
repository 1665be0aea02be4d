"""Pacing of tq-gc's TQ requests (tq_gc/stores/transferqueue/pacing.py): the waits and window sizes it
computes, and the request stats a deferred row store passes on."""

from __future__ import annotations

import pytest

from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.stores.transferqueue.pacing import FixedPacing, Pacer


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

    def take_pacing_stats(self) -> dict[str, float]:
        return {"quiet_wait": 0.5}


def test_a_deferred_store_passes_on_its_stores_request_stats_once_attached() -> None:
    deferred = DeferredRowStore(CountingStore)
    assert deferred.take_request_stats() == {}  # not attached yet: nothing asked
    deferred.ensure_attached()
    assert deferred.take_request_stats() == {"kv_retrieve_keys": [0.001, 0.002]}
    assert deferred.take_request_stats() == {}
    assert deferred.take_pacing_stats() == {"quiet_wait": 0.5}


def test_a_deferred_store_over_a_store_that_keeps_no_stats_reports_none() -> None:
    deferred = DeferredRowStore(MemoryRowStore)
    deferred.ensure_attached()
    assert deferred.take_request_stats() == {}
    assert deferred.take_pacing_stats() == {}


def test_the_batch_and_the_quiet_time_are_fixed_at_what_the_config_defaulted_to() -> None:
    """Not settings (docs/configuration.md): tests and benches set their own through FixedPacing."""
    fixed = FixedPacing()
    assert (fixed.batch, fixed.quiet_ms) == (2000, 20.0)
    assert fixed.quiet_seconds() == pytest.approx((0.020, 0.250))
    assert FixedPacing(quiet_ms=0).quiet_seconds()[0] == 0  # never wait


@pytest.mark.parametrize("values", [{"batch": 0}, {"quiet_ms": -1.0}, {"quiet_wait_max_ms": 0.0}])
def test_fixed_pacing_refuses_values_that_cannot_pace(values: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(values))):
        FixedPacing(**values)  # type: ignore[arg-type]
