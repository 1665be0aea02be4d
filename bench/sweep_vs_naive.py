"""tq-gc's full safe sweep against the naive restore-time clear, side by side on a real TransferQueue.

    scripts/bench                       # 100k staging rows, half orphans, 10k admissions, 4 manifests
    scripts/bench sweep --rows 1000000 --repeats 2 --duty-cycle 1

Each repeat fills the same data set twice and, in alternating order, times
  (a) tq-gc: the deleting sweep (lease, fence, list, references, plan, per-batch lease renewal, identity
      re-check, admission and fence re-read, delete, audit), with every row's first sighting done by an
      earlier sweep (that marking sweep is timed too, and reported apart);
  (b) naive: list the partition, subtract the referenced set, kv_clear the rest in batches of 2000;
and prints the median ratio a/b, rows deleted per second, and each side's peak Python heap (tracemalloc,
in a separate untimed pass per side), then a line of ratios. Only ratios from one run mean anything on a
noisy machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    PARTITION,
    DataSet,
    clear_rows,
    config_for,
    machine_load,
    naive_clear,
    publish_references,
    put_rows,
    shift_first_seen,
    start_ray_and_tq,
    start_redis,
    stop_process,
)


class Sides:
    """Both contestants over one attached row store and one state store."""

    def __init__(self, data: DataSet, state_url: str, duty_cycle: float | None) -> None:
        from tq_gc.registry import AdmissionRegistry
        from tq_gc.state import open_state
        from tq_gc.stores import attach_transfer_queue

        self.data = data
        pacing = {} if duty_cycle is None else {"duty_cycle": duty_cycle}
        self.config = config_for(data, state_url, transfer_queue=pacing)
        self.state = open_state(state_url, "bench")
        self.rows = attach_transfer_queue(self.config)
        self.registry = AdmissionRegistry(self.state)

        self._published = False

    def reset(self) -> None:
        """The data set's rows, all of them and only them, and its references (published once: neither
        side changes them)."""
        import transfer_queue as tq

        listed = set(tq.kv_list(PARTITION).get(PARTITION, {}))
        wanted = set(self.data.keys)
        clear_rows(sorted(listed - wanted))
        put_rows(sorted(wanted - listed))
        if not self._published:
            publish_references(self.data, self.registry)
            self._published = True

    def mark(self) -> float:
        from tq_gc.collector import Collector

        started = time.perf_counter()
        report = Collector(self.config, self.state, self.rows, holder="bench").sweep(dry_run=False)
        assert report.counts.within_grace == self.data.rows // 2, report.to_dict()
        self._let_grace_pass()
        return time.perf_counter() - started

    def _let_grace_pass(self) -> None:
        """Move the records a grace period back, as if sweeps had observed the rows all along (moving the
        clock instead would leave a gap in observation longer than the grace: the records would go)."""
        shift_first_seen(self.state, PARTITION, int(self.config.grace_seconds * 1000) + 1000)

    def tq_gc(self) -> int:
        from tq_gc.collector import Collector

        report = Collector(self.config, self.state, self.rows, holder="bench").sweep(dry_run=False)
        assert report.outcome.value == "completed", report.to_dict()
        self.last_phases_ms = report.phases_ms
        self.last_longest = report.to_dict()["longest_tq_request"]
        self.last_requests = {
            op: {"count": len(seconds), "total_ms": round(1000 * sum(seconds))}
            for op, seconds in report.tq_request_seconds.items()
        }
        return report.counts.deleted

    def naive(self) -> int:
        return naive_clear(self.data, self.registry)


def _rounded(phases: dict[str, float]) -> dict[str, int]:
    return {name: round(ms) for name, ms in phases.items()}


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    gc.collect()
    started = time.perf_counter()
    deleted = fn()
    return time.perf_counter() - started, deleted


def peak_heap(prepare: Callable[[], Any], fn: Callable[[], int]) -> int:
    """Bytes of the Python heap's peak while `fn` runs, over what it held before (tracemalloc: every
    Python allocation, the listing's decoded rows included). Not RSS: in one process a side reuses
    pages an earlier pass freed, so its RSS peak says nothing about the side."""
    prepare()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - before


def run(args: argparse.Namespace, state_url: str, manifest_dir: Path) -> dict[str, Any]:
    data = DataSet(args.rows, args.admissions, args.manifests, manifest_dir)
    sides = Sides(data, state_url, args.duty_cycle)
    ratios, a_times, b_times, marks = [], [], [], []
    for repeat in range(args.repeats):
        order = ["tq-gc", "naive"] if repeat % 2 == 0 else ["naive", "tq-gc"]
        result: dict[str, float] = {}
        for side in order:
            sides.reset()
            if side == "tq-gc":
                marks.append(sides.mark())
                seconds, deleted = timed(sides.tq_gc)
            else:
                seconds, deleted = timed(sides.naive)
            assert deleted == data.rows // 2, (side, deleted)
            result[side] = seconds
        a_times.append(result["tq-gc"])
        b_times.append(result["naive"])
        ratios.append(result["tq-gc"] / result["naive"])
        print(
            f"  repeat {repeat + 1}: tq-gc {result['tq-gc']:.3f} s, naive {result['naive']:.3f} s, "
            f"ratio {ratios[-1]:.2f}; tq-gc phases (ms) {_rounded(sides.last_phases_ms)}",
            file=sys.stderr,
        )

    # The last timed sweep's figures: the heap passes below sweep again, slowed by tracemalloc.
    timed_phases, timed_longest = sides.last_phases_ms, sides.last_longest
    timed_requests = sides.last_requests

    def prepare_tq_gc() -> None:
        sides.reset()
        sides.mark()

    heap_a = peak_heap(prepare_tq_gc, sides.tq_gc)
    heap_b = peak_heap(sides.reset, sides.naive)
    orphans = data.rows // 2
    return {
        "state": state_url.split(":")[0],
        "rows": data.rows,
        "orphans": orphans,
        "admissions": data.admissions,
        "manifests": data.manifests,
        "repeats": args.repeats,
        "median_ratio": round(statistics.median(ratios), 3),
        "tq_gc_median_s": round(statistics.median(a_times), 3),
        "naive_median_s": round(statistics.median(b_times), 3),
        "tq_gc_rows_per_s": round(orphans / statistics.median(a_times)),
        "naive_rows_per_s": round(orphans / statistics.median(b_times)),
        "mark_sweep_median_s": round(statistics.median(marks), 3),
        "tq_gc_phases_ms": _rounded(timed_phases),
        "tq_gc_longest_tq_request": timed_longest,
        "tq_gc_tq_requests": timed_requests,
        "duty_cycle": sides.config.transfer_queue.duty_cycle,
        "tq_gc_peak_heap_mib": round(heap_a / 2**20, 1),
        "naive_peak_heap_mib": round(heap_b / 2**20, 1),
        "heap_bytes_per_listed_row_over_naive": round((heap_a - heap_b) / data.rows, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--admissions", type=int, default=10_000)
    parser.add_argument("--manifests", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--state", choices=["memory", "redis", "both"], default="both")
    parser.add_argument(
        "--duty-cycle", type=float, help="transfer_queue.duty_cycle for tq-gc (default: the config default)"
    )
    args = parser.parse_args()

    import ray

    load_before = machine_load()
    start_ray_and_tq()
    redis_proc = None
    try:
        results = []
        with tempfile.TemporaryDirectory(prefix="tq-gc-bench-") as tmp:
            if args.state in ("memory", "both"):
                print("state memory://", file=sys.stderr)
                results.append(run(args, "memory://", Path(tmp) / "memory"))
            if args.state in ("redis", "both"):
                redis_proc, url = start_redis()
                print(f"state {url}", file=sys.stderr)
                results.append(run(args, url, Path(tmp) / "redis"))
        for result in results:
            print(json.dumps(result))
        print(json.dumps(ratio_line(results, load_before)))
    finally:
        stop_process(redis_proc)
        ray.shutdown()


def ratio_line(results: list[dict[str, Any]], load_before: dict[str, Any]) -> dict[str, Any]:
    return {
        "rows": results[0]["rows"] if results else 0,
        "ratio_tq_gc_over_naive": {r["state"]: r["median_ratio"] for r in results},
        "machine_load_before": load_before,
        "machine_load_after": machine_load(),
    }


if __name__ == "__main__":
    main()
