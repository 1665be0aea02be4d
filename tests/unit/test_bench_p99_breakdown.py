"""The live benchmark's p99 breakdown (bench/p99_breakdown.py): each iteration of the job's loop under
the tq-gc request it overlapped most, else the sweep phase it began in, else no sweep; and the p99 of the
loop without each activity's iterations."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from p99_breakdown import p99_breakdown


def _nearest_rank(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[max(0, min(len(sorted_values) - 1, round(fraction * len(sorted_values)) - 1))]


def test_each_iteration_goes_under_the_request_it_overlapped_most_else_its_phase() -> None:
    # 200 iterations every 0.1 s from t=0, 10 ms each but four: 80 and 70 ms beside a clear, 30 ms in
    # the listing phase beside no request, 20 ms beside a key window.
    began = [0.1 * i for i in range(200)]
    latencies = [0.010] * 200
    for i, latency in ((10, 0.080), (11, 0.070), (50, 0.030), (120, 0.020)):
        latencies[i] = latency
    requests = [
        ("clear_samples", 1.0, 1.2),
        ("partition_keys_window", 1.19, 1.3),  # overlaps iteration 11 (1.1-1.17) not at all
        ("partition_keys_window", 12.0, 12.05),  # iteration 120 (12.0-12.02)
    ]
    phases = [("listing", 4.0, 10.0), ("plan", 10.0, 13.0)]

    found = p99_breakdown({"latencies_s": latencies, "began_unix": began}, requests, phases, _nearest_rank)

    by = found["by_activity"]
    assert by["clear_samples"] == {
        "iterations": 2, "slowest_1pct": 2, "time_share": round(0.2 / 19.91, 4), "p99_ms_without": 10.0
    }  # fmt: skip
    assert by["partition_keys_window"]["iterations"] == 2  # iteration 12 (1.2-1.21) and 120
    assert by["listing (no TQ request)"]["iterations"] == 60
    assert by["plan (no TQ request)"] == {
        "iterations": 29, "slowest_1pct": 0, "time_share": None, "p99_ms_without": 30.0
    }  # fmt: skip
    assert by["no sweep"]["iterations"] == 200 - 2 - 2 - 60 - 29
    assert found["p99_ms"] == 30.0


def test_an_iteration_beside_no_request_but_a_pacing_wait_goes_under_that_wait() -> None:
    # 100 iterations every 0.1 s, 10 ms each; a quiet wait 2.0-2.3 s, a duty pause 5.0-5.5 s, a key
    # window 5.2-5.25 s inside the pause's span (a request wins over a wait).
    began = [0.1 * i for i in range(100)]
    latencies = [0.010] * 100
    requests = [
        ("quiet_wait", 2.0, 2.3),
        ("duty_pause", 5.0, 5.5),
        ("partition_keys_window", 5.2, 5.25),
    ]
    phases = [("listing", 1.0, 8.0)]

    by = p99_breakdown({"latencies_s": latencies, "began_unix": began}, requests, phases, _nearest_rank)[
        "by_activity"
    ]

    assert by["quiet_wait"]["iterations"] == 3  # 2.0, 2.1, 2.2
    assert by["duty_pause"]["iterations"] == 4  # 5.0, 5.1, 5.3, 5.4
    assert by["partition_keys_window"]["iterations"] == 1  # 5.2
    assert by["listing (no TQ request)"]["iterations"] == 70 - 8
    assert by["quiet_wait"]["time_share"] is None  # a wait holds nothing: no share of the controller


def test_the_breakdown_knows_every_pacing_wait_the_store_records() -> None:
    from p99_breakdown import WAITS

    from tq_gc.stores.transferqueue.requests import PACING_WAITS

    assert set(PACING_WAITS) == WAITS
