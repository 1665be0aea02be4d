"""What a swept partition's listing costs the TransferQueue controller, with the change journal and without.

    PYTHONPATH=$PWD .venv/bin/python bench/journal_listing.py --rows 100000 --changed 1000 --repeats 5

One partition of `--rows` rows held on a real TQ (SimpleStorage, 2 units, a local Ray cluster). Two row
stores attached side by side: one lists in full (the default), one by the change journal
(TransferQueueRowStore's `change_journal`, off by default). Each repeat times, in turn:
  full          the full listing (index pages and key windows over every row);
  journal, 0    the journalled listing with nothing changed since its last one;
  journal, N    the journalled listing after `--changed` rows were cleared and as many new ones put
                (they take the freed global indexes: N indexes touched, the rows held unchanged).
For each: the controller process's CPU seconds over the listing (time.process_time() read inside the
controller before and after; nothing else runs there meanwhile), the seconds of tq-gc's calls to the
controller as tq-gc saw them (Ray's round trips included), and the listing's wall seconds (the duty
cycle's pauses included). After each journalled listing, its keys and sizes are checked against the full
listing's. Prints medians, their ratios to the full listing, the machine's load, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from common import PARTITION, clear_rows, fixed_pacing, machine_load, put_rows, start_ray_and_tq


def controller_cpu_seconds() -> float:
    import ray

    controller = ray.get_actor("TransferQueueController", namespace="transfer_queue")
    return float(ray.get(controller.__ray_call__.remote(lambda _: time.process_time())))


def timed_listing(store: Any) -> tuple[dict[str, float], dict[str, int], dict[str, int]]:
    """({controller_cpu_s, calls_s, wall_s}, keys, sizes) of one list_keys of the partition."""
    store.take_request_stats()
    cpu_before = controller_cpu_seconds()
    started = time.perf_counter()
    keys = store.list_keys(PARTITION)
    wall = time.perf_counter() - started
    cpu = controller_cpu_seconds() - cpu_before
    calls = sum(sum(seconds) for seconds in store.take_request_stats().values())
    return {"controller_cpu_s": cpu, "calls_s": calls, "wall_s": wall}, keys, dict(store.row_sizes(PARTITION))


def timed_nothing() -> dict[str, float]:
    """The two controller CPU reads alone: what every figure below includes beside the listing."""
    cpu_before = controller_cpu_seconds()
    started = time.perf_counter()
    return {
        "controller_cpu_s": controller_cpu_seconds() - cpu_before,
        "wall_s": time.perf_counter() - started,
    }


def timed_churn(rows: int, tag: str) -> dict[str, float]:
    """The job's own work: `rows` new rows put then cleared, in batches (what the journal's wrappers
    record)."""
    keys = [f"churn-{tag}-{i}" for i in range(rows)]
    cpu_before = controller_cpu_seconds()
    started = time.perf_counter()
    put_rows(keys)
    clear_rows(keys)
    return {
        "controller_cpu_s": controller_cpu_seconds() - cpu_before,
        "wall_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from tq_gc.config import TransferQueueConfig
    from tq_gc.stores.transferqueue import TransferQueueRowStore
    from tq_gc.stores.transferqueue.journalled_keys import JournalSettings

    load_before = machine_load()
    start_ray_and_tq()
    keys = [f"row-{i}" for i in range(args.rows)]
    started = time.perf_counter()
    put_rows(keys)
    print(f"put {args.rows} rows in {time.perf_counter() - started:.1f} s")
    config = TransferQueueConfig(ray_address="auto")
    fixed = fixed_pacing(quiet_ms=0)
    runs: dict[str, list[dict[str, float]]] = {"full": [], "journal_0": [], f"journal_{args.changed}": []}
    runs["no_listing"] = [timed_nothing() for _ in range(args.repeats)]
    runs["job_churn_journal_off"] = [timed_churn(args.changed, f"off-{i}") for i in range(args.repeats)]
    with (
        TransferQueueRowStore.attach(config, fixed=fixed) as full,
        TransferQueueRowStore.attach(config, fixed=fixed, change_journal=JournalSettings()) as journalled,
    ):
        journalled.list_keys(PARTITION)  # its base: a full listing
        runs["job_churn_journal_on"] = [timed_churn(args.changed, f"on-{i}") for i in range(args.repeats)]
        fresh = 0
        for repeat in range(args.repeats):
            figures, full_keys, full_sizes = timed_listing(full)
            runs["full"].append(figures)
            figures, listed, sizes = timed_listing(journalled)
            assert (listed, sizes) == (full_keys, full_sizes), "the journalled listing is not the full one"
            runs["journal_0"].append(figures)
            gone = keys[repeat * args.changed : (repeat + 1) * args.changed]
            new = [f"new-{repeat}-{i}" for i in range(args.changed)]
            clear_rows(gone)
            put_rows(new)
            keys = keys[: repeat * args.changed] + new + keys[(repeat + 1) * args.changed :]
            figures, listed, sizes = timed_listing(journalled)
            runs[f"journal_{args.changed}"].append(figures)
            _, full_keys, full_sizes = timed_listing(full)
            assert (listed, sizes) == (full_keys, full_sizes), "the journalled listing is not the full one"
            fresh = journalled._listing.journalled.full_listings  # type: ignore[union-attr]
    report(args, runs, load_before, fresh)


def report(args: Any, runs: dict[str, list[dict[str, float]]], load_before: Any, full_listings: int) -> None:
    medians = {
        case: {name: statistics.median(run[name] for run in figures) for name in figures[0]}
        for case, figures in runs.items()
    }
    full = medians["full"]
    print(f"{args.rows} rows held, {args.repeats} repeats, medians (ratio to the full listing):")
    for case, figures in medians.items():
        if case.startswith("job_churn"):
            continue
        cells = "  ".join(
            f"{name} {value * 1000:9.1f} ms ({value / full[name]:.3f}x)" for name, value in figures.items()
        )
        print(f"  {case:>14}: {cells}")
    off, on = medians["job_churn_journal_off"], medians["job_churn_journal_on"]
    print(
        f"the job putting and clearing {args.changed} rows: "
        f"controller CPU {off['controller_cpu_s'] * 1000:.1f} ms "
        f"without the journal, {on['controller_cpu_s'] * 1000:.1f} ms with it "
        f"({on['controller_cpu_s'] / off['controller_cpu_s']:.3f}x); wall {on['wall_s'] / off['wall_s']:.3f}x"
    )
    print(f"journalled listings that were full ones: {full_listings} (the first, its base)")
    load = {"before": load_before, "after": machine_load()}
    print(f"machine load: {load}")
    print(json.dumps({"bench": "journal_listing", "rows": args.rows, "changed": args.changed,
                      "repeats": args.repeats, "medians": medians, "load": load}))  # fmt: skip


if __name__ == "__main__":
    main()
