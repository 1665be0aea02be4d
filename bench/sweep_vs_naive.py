"""tq-gc's full safe sweep against the naive restore-time clear, side by side on a real TransferQueue.

    scripts/bench                       # 100k staging rows, half orphans, 10k admissions, 4 manifests
    scripts/bench sweep --rows 1000000 --repeats 2 --duty-cycle 1 --quiet-ms 0

Each state (memory://, then a Redis of its own) in turn: each repeat refills the same data set before
each side and times them all, in an order that rotates from one repeat to the next (so a drift of the
machine during the run falls on every side alike). tq-gc's collectors are made once a state and kept,
as a sidecar keeps its own (their claim on the TQ, a Ray actor, is made at the first sweep):
  (a) tq-gc: the deleting sweep (lease, fence, list, references, plan, per-batch lease renewal, identity
      re-check, admission and fence re-read, delete, audit), with every row's first sighting done by an
      earlier sweep (that marking sweep is timed too, and reported apart);
  (b) naive: list the partition, subtract the referenced set, kv_clear the rest in batches of 2000;
  (c) with --unsized: tq-gc's sweep without reading the rows' sizes and the storage units' fill (its
      listing's controller-side reader asks for keys only, its row store reports no fill): the sweep as
      it was before bytes and headroom, from the same code, so that their cost is measured in one run;
and prints per state the median of the per-repeat ratios a/b (each state's a over its own b), rows
deleted per second, and each side's peak Python heap (tracemalloc,
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
    fixed_pacing,
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

    def __init__(
        self,
        data: DataSet,
        state_url: str,
        duty_cycle: float | None,
        quiet_ms: float | None,
        unsized: bool = False,
    ) -> None:
        from tq_gc.publish.registry import AdmissionRegistry
        from tq_gc.state import open_state
        from tq_gc.stores.transferqueue import TransferQueueRowStore
        from tq_gc.wiring import DEFAULT_DUTY_CYCLE

        self.data = data
        self.config = config_for(data, state_url)
        self.duty_cycle = DEFAULT_DUTY_CYCLE if duty_cycle is None else duty_cycle
        self.fixed = fixed_pacing(quiet_ms=quiet_ms)
        self.state = open_state(state_url, "bench")
        attached = {"duty_cycle": self.duty_cycle, "fixed": self.fixed}
        self.rows = TransferQueueRowStore.attach(self.config.transfer_queue, **attached)
        self.unsized_rows = attach_unsized(self.config, self.duty_cycle, self.fixed) if unsized else None
        self.registry = AdmissionRegistry(self.state)

        self._published = False
        self._collectors: dict[int, Any] = {}

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

        started = time.perf_counter()
        report = self._collector(self.rows).sweep(dry_run=False)
        assert report.counts.within_grace == self.data.rows // 2, report.to_dict()
        self._let_grace_pass()
        return time.perf_counter() - started

    def _let_grace_pass(self) -> None:
        """Move the records a grace period back, as if sweeps had observed the rows all along (moving the
        clock instead would leave a gap in observation longer than the grace: the records would go)."""
        shift_first_seen(self.state, PARTITION, int(self.config.grace_seconds * 1000) + 1000)

    def _collector(self, rows: Any) -> Any:
        """The collector of `rows`, made once and kept, as a sidecar keeps its own: its claim on the TQ
        (a Ray actor made at the first sweep, ~0.4 s) lasts until close(), not one sweep."""
        from tq_gc.sweep import Collector

        if id(rows) not in self._collectors:
            self._collectors[id(rows)] = Collector(self.config, self.state, rows, holder="bench")
        return self._collectors[id(rows)]

    def close(self) -> None:
        """End the collectors' claims: the next state's sides sweep the same TQ (a claim left held would
        make them skip with tq_claimed, as it should)."""
        for collector in self._collectors.values():
            collector.close()
        self._collectors.clear()

    def tq_gc(self) -> int:
        return self._sweep(self.rows)

    def tq_gc_unsized(self) -> int:
        assert self.unsized_rows is not None
        return self._sweep(self.unsized_rows)

    def _sweep(self, rows: Any) -> int:

        report = self._collector(rows).sweep(dry_run=False)
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


def attach_unsized(config: Any, duty_cycle: float, fixed: Any) -> Any:
    """A second row store on the same TQ that reads no sizes and no storage fill (side c)."""
    from tq_gc.stores.transferqueue import TransferQueueRowStore
    from tq_gc.stores.transferqueue.key_windows import KeyWindows

    class UnsizedRowStore(TransferQueueRowStore):
        def storage_fill(self) -> Any:  # no fill: the sweep reads none
            return None

    return UnsizedRowStore.attach(
        config.transfer_queue,
        duty_cycle=duty_cycle,
        key_windows=KeyWindows(reader=keys_only_reader()),
        fixed=fixed,
    )


def keys_only_reader() -> Any:
    """The listing's controller-side reader (internals.keys_reader) without the sizes. Nested, so that
    Ray ships it to the controller by value."""

    def read_keys(controller: Any, partition: str, indexes: Any) -> tuple[list[str | None], None]:
        status = controller.partitions.get(partition)
        if status is None:
            return [None] * len(indexes), None
        owners = status.revert_keys_mapping
        return [owners.get(index) for index in indexes], None

    return read_keys


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


def run(args: argparse.Namespace, state_urls: list[str], manifest_dir: Path) -> list[dict[str, Any]]:
    """Each state in turn (their collectors each claim the TQ for their own state store), its sides all
    timed within each repeat in an order that rotates from one repeat to the next, so that a drift of the
    machine during the run falls on every side alike. Each repeat's ratio is its tq-gc over its naive."""
    data = DataSet(args.rows, args.admissions, args.manifests, manifest_dir)
    return [run_state(args, data, url) for url in state_urls]


def run_state(args: argparse.Namespace, data: DataSet, url: str) -> dict[str, Any]:
    sides = Sides(data, url, args.duty_cycle, args.quiet_ms, args.unsized)
    try:
        names = ["tq-gc", "naive", *(["unsized"] if args.unsized else [])]
        sweeps = {"tq-gc": sides.tq_gc, "naive": sides.naive, "unsized": sides.tq_gc_unsized}
        times: dict[str, list[float]] = {name: [] for name in names}
        marks: list[float] = []
        for repeat in range(args.repeats):
            shift = repeat % len(names)
            for side in names[shift:] + names[:shift]:
                sides.reset()
                if side == "tq-gc":
                    marks.append(sides.mark())
                elif side == "unsized":
                    sides.mark()
                seconds, deleted = timed(sweeps[side])
                assert deleted == data.rows // 2, (url, side, deleted)
                times[side].append(seconds)
            a, b = times["tq-gc"][-1], times["naive"][-1]
            c = f", unsized {times['unsized'][-1]:.3f} s" if args.unsized else ""
            print(
                f"  repeat {repeat + 1}, {_state_name(url)}: tq-gc {a:.3f} s, naive {b:.3f} s{c}, ratio "
                f"{a / b:.2f}; tq-gc phases (ms) {_rounded(sides.last_phases_ms)}",
                file=sys.stderr,
            )
        line = result(sides, times["tq-gc"], times["naive"], marks, heap=not args.no_heap)
        if args.unsized:
            line.update(unsized_figures(times["tq-gc"], times["naive"], times["unsized"]))
        return line
    finally:
        sides.close()


def unsized_figures(sized: list[float], naive: list[float], unsized: list[float]) -> dict[str, Any]:
    """Side c against a and b, per repeat: what reading sizes and fill costs the sweep."""
    over_naive = [c / b for c, b in zip(unsized, naive, strict=True)]
    sized_over_unsized = [a / c for a, c in zip(sized, unsized, strict=True)]
    return {
        "unsized_median_s": round(statistics.median(unsized), 3),
        "unsized_median_ratio": round(statistics.median(over_naive), 3),
        "unsized_ratios": [round(ratio, 3) for ratio in over_naive],
        "sized_over_unsized_median": round(statistics.median(sized_over_unsized), 3),
        "sized_over_unsized": [round(ratio, 3) for ratio in sized_over_unsized],
    }


def result(
    sides: Sides, a_times: list[float], b_times: list[float], marks: list[float], heap: bool = True
) -> dict[str, Any]:
    """One state's line: the timed repeats' figures, then each side's peak heap in passes of its own
    (unless `heap` is False: at 1M rows they cost two more refills and sweeps a side)."""
    # The last timed sweep's figures: the heap passes below sweep again, slowed by tracemalloc.
    timed_phases, timed_longest = sides.last_phases_ms, sides.last_longest
    timed_requests = sides.last_requests

    def prepare_tq_gc() -> None:
        sides.reset()
        sides.mark()

    heap_a = peak_heap(prepare_tq_gc, sides.tq_gc) if heap else 0
    heap_b = peak_heap(sides.reset, sides.naive) if heap else 0
    data = sides.data
    orphans = data.rows // 2
    ratios = [a / b for a, b in zip(a_times, b_times, strict=True)]
    return {
        "state": _state_name(sides.config.state_url),
        "rows": data.rows,
        "orphans": orphans,
        "admissions": data.admissions,
        "manifests": data.manifests,
        "repeats": len(ratios),
        "median_ratio": round(statistics.median(ratios), 3),
        "ratios": [round(ratio, 3) for ratio in ratios],
        "tq_gc_median_s": round(statistics.median(a_times), 3),
        "naive_median_s": round(statistics.median(b_times), 3),
        "tq_gc_rows_per_s": round(orphans / statistics.median(a_times)),
        "naive_rows_per_s": round(orphans / statistics.median(b_times)),
        "mark_sweep_median_s": round(statistics.median(marks), 3),
        "tq_gc_phases_ms": _rounded(timed_phases),
        "tq_gc_longest_tq_request": timed_longest,
        "tq_gc_tq_requests": timed_requests,
        "duty_cycle": sides.duty_cycle,
        "quiet_ms": sides.fixed.quiet_ms,
        **(
            {
                "tq_gc_peak_heap_mib": round(heap_a / 2**20, 1),
                "naive_peak_heap_mib": round(heap_b / 2**20, 1),
                "heap_bytes_per_listed_row_over_naive": round((heap_a - heap_b) / data.rows, 1),
            }
            if heap
            else {}
        ),
        "interleaved": True,
    }


def _state_name(url: str) -> str:
    return url.split(":")[0]


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
        "--duty-cycle",
        type=float,
        help="tq-gc's duty cycle, as `tq-gc --duty-cycle` chooses it (default: 0.25)",
    )
    parser.add_argument(
        "--quiet-ms",
        type=float,
        help="the store's quiet moments for tq-gc, FixedPacing.quiet_ms (default: 20; 0: no wait for quiet)",
    )
    parser.add_argument(
        "--unsized",
        action="store_true",
        help="a third side: the sweep without reading sizes and storage fill (before bytes and headroom)",
    )
    parser.add_argument(
        "--no-heap", action="store_true", help="time the sides only, without the peak-heap passes"
    )
    args = parser.parse_args()

    import ray

    load_before = machine_load()
    start_ray_and_tq()
    redis_proc = None
    try:
        urls = ["memory://"] if args.state in ("memory", "both") else []
        if args.state in ("redis", "both"):
            redis_proc, url = start_redis()
            urls.append(url)
        print(f"states {', '.join(urls)}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="tq-gc-bench-") as tmp:
            results = run(args, urls, Path(tmp))
        for line in results:
            print(json.dumps(line))
        print(json.dumps(ratio_line(results, load_before)))
    finally:
        stop_process(redis_proc)
        ray.shutdown()


def ratio_line(results: list[dict[str, Any]], load_before: dict[str, Any]) -> dict[str, Any]:
    return {
        "rows": results[0]["rows"] if results else 0,
        "ratio_tq_gc_over_naive": {r["state"]: r["median_ratio"] for r in results},
        **(
            {"ratio_unsized_over_naive": {r["state"]: r["unsized_median_ratio"] for r in results}}
            if results and "unsized_median_ratio" in results[0]
            else {}
        ),
        "machine_load_before": load_before,
        "machine_load_after": machine_load(),
    }


if __name__ == "__main__":
    main()
