"""Does tq-gc slow the training job? The job's own TransferQueue traffic, timed side by side in one run.

    scripts/bench live --rows 1000000
    scripts/bench live --rows 200000 --window-seconds 45 --out bench/results/live.jsonl

A stand-in for the job's data plane (a Ray actor, a process of its own like the job's workers) runs a loop
every 50 ms, give or take --loop-jitter-ms (5): kv_batch_put 32 rows plus one orphan row (the trickle),
kv_batch_get the 32, kv_clear them. It shares the staging partition with N rows, half of them orphans (the
other half referenced by admissions and manifests, as in sweep_vs_naive). For each configuration the loop
runs for the same window, and its iteration latencies are kept:

  no-tq-gc            the loop alone
  naive-clear         a restore-time clear (kv_list, subtract the referenced rows, kv_clear the rest in
                      batches of 2,000) runs once, from another process, 1 s into the window
  tq-gc-default       the tq-gc sidecar (Redis state) with the default config: schedule, limits, batches;
                      the window starts 5 s before its first scheduled sweep
  tq-gc-back-to-back  the same with schedule.interval_seconds: 1; the window starts once the sidecar
                      has started up (imported TQ, as it does beside the job's own start-up)
  tq-gc-warm          (asked for by --configs) the default schedule, the sidecar warmed first by one
                      sweep outside the window (attached, claimed, every row listed and recorded):
                      what every later sweep of a sidecar beside the job meets. With --change-journal
                      the window's sweep lists by the journal its warm-up installed
  tq-gc-warm-back-to-back  the same, back to back

With --change-journal, both tq-gc configurations start their sidecar with the change journal
(start_sidecar's change_journal): each sweep after its first re-reads only the rows changed since the last
one; each configuration's line counts its sweeps' listings by how (`listings`: journal, full).

Before each tq-gc configuration the orphans' first sightings are written a grace period back, so its
sweeps delete them (the worst case: every sweep marks and deletes); between configurations the partition
is refilled to N rows. One JSON line per configuration, then one of ratios to no-tq-gc, each with the
machine's load: the machine is shared, read ratios, not absolute milliseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from common import (
    PARTITION,
    DataSet,
    clear_rows,
    config_for,
    fill,
    fixed_pacing,
    machine_load,
    naive_clear,
    paced_row_store,
    publish_references,
    put_rows,
    quiet_tq,
    slowest_1pct,
    start_ray_and_tq,
    start_redis,
    stop_process,
    tags_for,
)
from gc_log import pauses_beside, start_gc_log, stop_gc_log
from p99_breakdown import p99_breakdown, start_request_spans, stop_request_spans

DEFAULT_CONFIGS = ("no-tq-gc", "naive-clear", "tq-gc-default", "tq-gc-back-to-back")
CONFIGS = (*DEFAULT_CONFIGS, "tq-gc-warm", "tq-gc-warm-back-to-back")
BASELINE = CONFIGS[0]
NAMESPACE = "live"
LOOP_PERIOD_S = 0.05
# Each period is drawn from LOOP_PERIOD_S +- this (--loop-jitter-ms). A loop of exact periods locks in
# phase with the sidecar's exact schedule: back to back at 100k rows every sweep started 2.000 s after
# the last, 10 ms before an iteration, so the same moment of the sweep met the same moment of the loop
# every time, and the p99 depended on where that phase happened to fall. A job's steps vary.
LOOP_JITTER_MS = 5.0
LOOP_ROWS = 32
# The naive clear starts this far into its window, so the window also holds the loop alone at first.
NAIVE_DELAY_S = 1.0
# The default schedule's first sweep comes one interval after the sidecar starts: the window opens
# this long before it.
LEAD_S = 5.0
BACK_TO_BACK_INTERVAL_S = 1.0
# After a window, how long a sweep in progress may take to end (a paced 1M-row sweep: a minute or two).
FINISH_WAIT_S = 150.0
REPORTS_POLL_S = 3.0  # the sidecar keeps its last 10 reports; a sweep takes longer than this
# A sidecar killed mid-sweep leaves its lease until the TTL (60 s by default) runs out.
LEASE_WAIT_S = 75.0
# The sidecar's import of TQ at its start: 3-6 s of CPU here, longer on a loaded node.
START_UP_WAIT_S = 120.0


class JobLoop:
    """The job's data plane: put, get, clear, every LOOP_PERIOD_S (give or take the jitter), timed one
    iteration at a time."""

    def __init__(self, jitter_s: float = LOOP_JITTER_MS / 1000) -> None:
        quiet_tq()
        import torch
        import transfer_queue as tq
        from tensordict import TensorDict

        tq.init()  # attaches: the job's TQ exists (never close() here: it would kill the controller)
        self._tq = tq
        self._jitter_s = jitter_s
        self._random = random.Random()
        self._fields = TensorDict(
            {"token_ids_delta": torch.zeros(LOOP_ROWS + 1, 16, dtype=torch.int32)}, batch_size=LOOP_ROWS + 1
        )

    def run(self, window_s: float, trickle_prefix: str) -> dict[str, Any]:
        latencies: list[float] = []
        began_unix: list[float] = []
        started = time.monotonic()
        due = started
        while due - started < window_s:
            time.sleep(max(0.0, due - time.monotonic()))
            began_unix.append(time.time())
            began = time.perf_counter()
            self._iteration(len(latencies), trickle_prefix)
            latencies.append(time.perf_counter() - began)
            period = LOOP_PERIOD_S + self._random.uniform(-self._jitter_s, self._jitter_s)
            due = max(due + period, time.monotonic())  # a late iteration is not made up for
        return {"latencies_s": latencies, "began_unix": began_unix, "elapsed_s": time.monotonic() - started}

    def _iteration(self, i: int, trickle_prefix: str) -> None:
        tq = self._tq
        keys = [f"job/{trickle_prefix}/{i}/{j}" for j in range(LOOP_ROWS)]
        orphan = f"{trickle_prefix}/{i}"
        tags = [tags_for(key) for key in [*keys, orphan]]
        tq.kv_batch_put(keys=[*keys, orphan], partition_id=PARTITION, fields=self._fields, tags=tags)
        tq.kv_batch_get(keys=keys, partition_id=PARTITION)
        tq.kv_clear(keys, PARTITION)


class NaiveRestore:
    """The restore-time clear, in a process of its own."""

    def __init__(self, data: DataSet, state_url: str) -> None:
        quiet_tq()
        import transfer_queue as tq

        from tq_gc.publish.registry import AdmissionRegistry
        from tq_gc.state import open_state

        tq.init()
        self._data = data
        self._registry = AdmissionRegistry(open_state(state_url, NAMESPACE))

    def run(self, delay_s: float) -> dict[str, Any]:
        time.sleep(delay_s)
        started = time.perf_counter()
        deleted = naive_clear(self._data, self._registry)
        return {"deleted": deleted, "clear_s": round(time.perf_counter() - started, 3)}


def _renice(_actor: Any, niceness: int) -> None:
    """Run in the sidecar's process: every thread of it (Linux niceness is per thread) at `niceness`."""
    import os

    for tid in os.listdir("/proc/self/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), niceness)


def _started_up(_actor: Any) -> bool:
    """Run in the sidecar's process: its import of TQ at start (tq_gc.stores) is over."""
    from tq_gc.stores import transfer_queue_imported

    return transfer_queue_imported()


def ray_get(ref: Any) -> Any:
    import ray

    return ray.get(ref)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def summary(config: str, rows: int, loop: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    ms = sorted(1000 * s for s in loop["latencies_s"])
    return {
        "config": config,
        "rows": rows,
        "iterations": len(ms),
        "window_s": round(loop["elapsed_s"], 1),
        "p50_ms": round(percentile(ms, 0.50), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "p999_ms": round(percentile(ms, 0.999), 2),
        "max_ms": round(ms[-1], 2) if ms else math.nan,
        **extra,
        "machine_load": machine_load(),
    }


SWEEP_PHASES = ("attach", "listing", "plan", "delete")


def sweep_phases(report: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(phase, start, end) in unix seconds of one sweep, from its report: the lease and joining the
    job's TQ first ("attach"; the sidecar joins at its first sweep), the delete last, the plan before
    it, and between those the references and the listing ("listing")."""
    from datetime import datetime

    started = datetime.fromisoformat(report["started_at"]).timestamp()
    finished = datetime.fromisoformat(report["finished_at"]).timestamp()
    phases_ms = report["phases_ms"]
    listing_at = started + (phases_ms.get("lease", 0.0) + phases_ms.get("attach", 0.0)) / 1000
    delete_at = finished - phases_ms.get("delete", 0.0) / 1000
    plan_at = delete_at - phases_ms.get("plan", 0.0) / 1000
    return [
        ("attach", started, listing_at),
        ("listing", listing_at, plan_at),
        ("plan", plan_at, delete_at),
        ("delete", delete_at, finished),
    ]


def slowest_by_phase(loop: dict[str, Any], reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the loop's slowest 1% of iterations began (which sweep phase, or none), beside each phase's
    share of the window: a phase holding more of the slowest than of the time is what the p99 sees."""
    latencies, began = loop["latencies_s"], loop["began_unix"]
    if not latencies:
        return {}
    slowest = slowest_1pct(latencies)
    spans = [span for report in reports for span in sweep_phases(report)]

    def phase_at(t: float) -> str:
        return next((name for name, start, end in spans if start <= t < end), "no sweep")

    slow = Counter(phase_at(began[i]) for i in slowest)
    window = (began[0], began[-1] + latencies[-1])

    def share_of(phase: str) -> float:
        covered = sum(_overlap((start, end), window) for name, start, end in spans if name == phase)
        return round(covered / (window[1] - window[0]), 3)

    share = {phase: share_of(phase) for phase in SWEEP_PHASES}
    return {"count": dict(slow), "window_share": share}


def _overlap(span: tuple[float, float], window: tuple[float, float]) -> float:
    return max(0.0, min(span[1], window[1]) - max(span[0], window[0]))


class Bench:
    def __init__(self, args: argparse.Namespace, state_url: str, manifest_dir: Path) -> None:
        import ray

        from tq_gc.publish.registry import AdmissionRegistry
        from tq_gc.state import open_state

        self.args = args
        self.state_url = state_url
        self.data = DataSet(args.rows, args.admissions, args.manifests, manifest_dir)
        self.state = open_state(state_url, NAMESPACE)
        self.registry = AdmissionRegistry(self.state)
        self.job = ray.remote(num_cpus=0)(JobLoop).remote(args.loop_jitter_ms / 1000)
        self.naive = ray.remote(num_cpus=0)(NaiveRestore).remote(self.data, state_url)

    def prepare(self) -> None:
        started = time.monotonic()
        fill(self.data)
        publish_references(self.data, self.registry)
        self._loop(1.0, "warm-up")
        log(f"filled {self.data.rows} rows and published references in {time.monotonic() - started:.0f} s")

    def refill(self) -> None:
        """Back to N rows: the data set's, and no loop or trickle rows."""
        import transfer_queue as tq

        listed = set(tq.kv_list(PARTITION).get(PARTITION, {}))
        wanted = set(self.data.keys)
        clear_rows(sorted(listed - wanted))
        put_rows(sorted(wanted - listed))

    def measure(self, config: str) -> dict[str, Any]:
        self.refill()
        if config == "no-tq-gc":
            self._start_gc_logs({})
            loop = self._loop(self.args.window_seconds, config)
            return summary(config, self.data.rows, loop, self._gc_pauses({}, loop))
        if config == "naive-clear":
            import ray

            self._start_gc_logs({})
            restore = self.naive.run.remote(NAIVE_DELAY_S)
            loop = self._loop(self.args.window_seconds, config)
            return summary(config, self.data.rows, loop, {**ray.get(restore), **self._gc_pauses({}, loop)})
        return self._with_sidecar(config)

    def _gc_logged(self, others: dict[str, Any]) -> dict[str, Any]:
        import ray

        from tq_gc.stores.transferqueue.attach import CONTROLLER_NAME, CONTROLLER_NAMESPACE

        controller = ray.get_actor(CONTROLLER_NAME, namespace=CONTROLLER_NAMESPACE)
        return {"job": self.job, "controller": controller, **others}

    def _start_gc_logs(self, others: dict[str, Any]) -> None:
        for handle in self._gc_logged(others).values():
            ray_get(handle.__ray_call__.remote(start_gc_log))

    def _gc_pauses(self, others: dict[str, Any], loop: dict[str, Any]) -> dict[str, Any]:
        """The collections each process made during the window (gc_log.py)."""
        logged = self._gc_logged(others).items()
        pauses = {name: ray_get(handle.__ray_call__.remote(stop_gc_log)) for name, handle in logged}
        return {"gc_pauses": {name: pauses_beside(loop, each) for name, each in pauses.items()}}

    def _with_sidecar(self, config: str) -> dict[str, Any]:
        from tq_gc.sidecar.client import start_sidecar, stop_sidecar

        warm = config.startswith("tq-gc-warm")
        if warm:
            self._forget_first_seen()  # an earlier configuration's records: the warm-up deletes nothing
        else:
            self._mark_orphans_past_grace()
        schedule = {"interval_seconds": BACK_TO_BACK_INTERVAL_S} if config.endswith("back-to-back") else {}
        sidecar_config = config_for(
            self.data,
            self.state_url,
            namespace=NAMESPACE,
            schedule=schedule,
            grace_seconds=900,
        )
        handle = start_sidecar(
            sidecar_config,
            self._row_store_factory(),
            duty_cycle=self._duty_cycle(),
            change_journal=self.args.change_journal,
            name=f"tq-gc-bench-{config}",  # one sidecar per configuration run, each of its own
        )
        if self.args.sweeper_nice:
            ray_get(handle.__ray_call__.remote(_renice, self.args.sweeper_nice))
        try:
            self._wait_for_start_up(handle)
            warm_up = self._warm_up(handle) if warm else {}
            self._wait_for_first_sweep(handle)
            self._start_gc_logs({"sidecar": handle})
            ray_get(handle.__ray_call__.remote(start_request_spans))
            loop, reports = self._loop_beside(handle, config, warm_up.get("warm_up_run_id"))
            requests = ray_get(handle.__ray_call__.remote(stop_request_spans))
            gc_pauses = self._gc_pauses({"sidecar": handle}, loop)
            sweeps = {**self.sweeps(reports), **self._let_sweep_finish(handle)}
            every_sweep = {
                r["run_id"]: r
                for r in [*reports, *ray_get(handle.status.remote())["last_reports"]]
                if r["run_id"] != warm_up.get("warm_up_run_id")
            }
            phases = {
                "slowest_1pct_by_phase": slowest_by_phase(loop, list(every_sweep.values())),
                "p99_breakdown": p99_breakdown(
                    loop,
                    requests,
                    [span for report in every_sweep.values() for span in sweep_phases(report)],
                    percentile,
                ),
            }
            settings = {
                "sweeper_nice": self.args.sweeper_nice,
                "duty_cycle": self._duty_cycle(),
                "change_journal": self.args.change_journal,
                "fixed_pacing": {"batch": self._fixed().batch, "quiet_ms": self._fixed().quiet_ms},
            }
            extra = {**sweeps, **phases, **gc_pauses, **settings, **warm_up}
            return summary(config, self.data.rows, loop, extra)
        finally:
            stop_sidecar(handle)

    def _duty_cycle(self) -> float:
        """The sidecar's duty cycle: --duty-cycle, else the default (start_sidecar's duty_cycle)."""
        from tq_gc.wiring import DEFAULT_DUTY_CYCLE

        return DEFAULT_DUTY_CYCLE if self.args.duty_cycle is None else float(self.args.duty_cycle)

    def _fixed(self) -> Any:
        """The store's fixed pacing, with --batch and --quiet-ms where given."""
        return fixed_pacing(self.args.batch, self.args.quiet_ms)

    def _row_store_factory(self) -> Any:
        """None (the sidecar's own attach) unless --batch or --quiet-ms changes the store's fixed pacing."""
        if self.args.batch is None and self.args.quiet_ms is None:
            return None
        return partial(paced_row_store, self._fixed())

    def _mark_orphans_past_grace(self) -> None:
        """The orphans' first sightings, a grace period back, as an earlier sweep would have left them
        (with no global index pinned: the identity check then compares the tags digest only)."""
        from tq_gc.first_seen import FirstSeen
        from tq_gc.rows import Identity, tags_digest

        now_ms = self.state.now_ms()
        back_ms = now_ms - 901_000
        records = {
            key: FirstSeen(back_ms, Identity(tags_digest(tags_for(key)))) for key in self.data.orphans()
        }
        lease = self._lease()
        self.state.forget_partition(lease, PARTITION)
        self.state.save_first_seen(lease, PARTITION, records, [], observed_ms=now_ms)
        self.state.release_lease(lease)

    def _warm_up(self, handle: Any) -> dict[str, Any]:
        """One sweep outside the window, its schedule paused meanwhile: it attaches, claims, lists every
        row and records the orphans' first sightings (deleting none: they are new to it). Then the
        orphans are marked past grace as for the other configurations, and the schedule resumes (the
        next sweep one interval later)."""
        import ray

        ray.get(handle.pause.remote())
        report = ray.get(handle.sweep_now.remote())
        assert report["outcome"] == "completed" and report["counts"]["deleted"] == 0, report
        self._mark_orphans_past_grace()
        ray.get(handle.resume.remote())
        return {
            "warm_up_run_id": report["run_id"],
            "warm_up_phases_ms": {k: round(v) for k, v in report["phases_ms"].items()},
        }

    def _forget_first_seen(self) -> None:
        lease = self._lease()
        self.state.forget_partition(lease, PARTITION)
        self.state.release_lease(lease)

    def _lease(self) -> Any:
        """The state's lease, once a sidecar stopped mid-sweep has let it go (its TTL)."""
        lease = self.state.acquire_lease("bench", 60_000)
        deadline = time.monotonic() + LEASE_WAIT_S
        while lease is None and time.monotonic() < deadline:
            time.sleep(1.0)
            lease = self.state.acquire_lease("bench", 60_000)
        assert lease is not None, "a sidecar still holds the lease"
        return lease

    @staticmethod
    def _wait_for_start_up(handle: Any) -> None:
        """Wait until the sidecar has imported TQ (a thread at its start, 3-6 s of CPU here). In a job
        that import runs beside the job's own start-up; back to back, the first sweep (1 s in) would
        otherwise wait for it inside the window."""
        deadline = time.monotonic() + START_UP_WAIT_S
        while not ray_get(handle.__ray_call__.remote(_started_up)):
            assert time.monotonic() < deadline, "the sidecar did not import TransferQueue"
            time.sleep(0.5)

    @staticmethod
    def _wait_for_first_sweep(handle: Any) -> None:
        from datetime import UTC, datetime

        import ray

        next_run = ray.get(handle.status.remote())["next_run_at"]
        wait_s = datetime.fromisoformat(next_run).timestamp() - datetime.now(UTC).timestamp() - LEAD_S
        time.sleep(max(0.0, wait_s))

    @staticmethod
    def _let_sweep_finish(handle: Any) -> dict[str, Any]:
        """After the window: no new sweep, and the one in progress (if any) runs to its end, so the
        sidecar stops cleanly (a sweep stops early only between delete batches) and reports it. Its
        report is given apart: it may have gone on past the window."""
        import ray

        ray.get(handle.pause.remote())
        waited = time.monotonic()
        while ray.get(handle.status.remote())["sweeping"] and time.monotonic() - waited < FINISH_WAIT_S:
            time.sleep(1.0)
        reports = ray.get(handle.status.remote())["last_reports"]
        if not reports:
            return {"sweep_after_window": None}
        last = reports[0]
        return {
            "sweep_after_window": {
                "finished_s_after_window": round(time.monotonic() - waited, 1),
                "outcome": last["outcome"],
                "deleted": last["counts"]["deleted"],
                "phases_ms": {k: round(v) for k, v in last["phases_ms"].items()},
                "longest_tq_request": last.get("longest_tq_request"),
            }
        }

    def _loop_beside(
        self, handle: Any, config: str, warm_up_run_id: str | None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The job's loop, and the report of every sweep that ended during it (the sidecar keeps only its
        last 10: it is asked every few seconds), the warm-up's not among them."""
        import ray

        running = self.job.run.remote(self.args.window_seconds, f"trickle-{config}")
        reports: dict[str, dict[str, Any]] = {}
        while True:
            done, _ = ray.wait([running], timeout=REPORTS_POLL_S)
            for report in ray.get(handle.status.remote())["last_reports"]:
                if report["run_id"] != warm_up_run_id:
                    reports[report["run_id"]] = report
            if done:
                return ray.get(running), sorted(reports.values(), key=lambda r: r["started_at"], reverse=True)

    @staticmethod
    def sweeps(reports: list[dict[str, Any]]) -> dict[str, Any]:
        """What the sweeps of a window did: how many, their deletes and outcomes, their longest request,
        the last one's phases, and how their partitions were listed (by the change journal, in full)."""
        listed_by = Counter(how["by"] for r in reports for how in (r.get("listings") or {}).values())
        return {
            "sweeps": len(reports),
            "deleted": sum(r["counts"]["deleted"] for r in reports),
            "outcomes": sorted({r["outcome"] for r in reports}),
            "longest_tq_request": max(
                (r["longest_tq_request"] for r in reports if r.get("longest_tq_request")),
                key=lambda longest: float(longest["ms"]),
                default=None,
            ),
            "phases_ms_last": {k: round(v) for k, v in (reports[0]["phases_ms"] if reports else {}).items()},
            "listings": dict(sorted(listed_by.items())),
        }

    def _loop(self, window_s: float, config: str) -> dict[str, Any]:
        import ray

        result: dict[str, Any] = ray.get(self.job.run.remote(window_s, f"trickle-{config}"))
        return result


def ratios(results: list[dict[str, Any]], load_before: dict[str, Any]) -> dict[str, Any]:
    """Each configuration's metrics over the baseline's. With the baseline run more than once (say first
    and last), over their mean, and `baseline_spread` says how far the runs of the loop alone were apart
    (max/min): the run's noise floor, below which no ratio means anything."""
    bases = [r for r in results if r["config"] == BASELINE]
    labels = _labels([r["config"] for r in results])

    def base(metric: str) -> float:
        return sum(r[metric] for r in bases) / len(bases)

    def over_base(metric: str) -> dict[str, float]:
        return {
            label: round(r[metric] / base(metric), 2)
            for label, r in zip(labels, results, strict=True)
            if r["config"] != BASELINE
        }

    metrics = {"p50": "p50_ms", "p99": "p99_ms", "p999": "p999_ms", "max": "max_ms"}
    line: dict[str, Any] = {"rows": bases[0]["rows"], "ratio_to": BASELINE, "baseline_runs": len(bases)}
    line |= {name: over_base(metric) for name, metric in metrics.items()}
    if len(bases) > 1:
        line["baseline_spread"] = {
            name: round(max(r[metric] for r in bases) / min(r[metric] for r in bases), 2)
            for name, metric in metrics.items()
        }
    return line | {"machine_load_before": load_before, "machine_load_after": machine_load()}


def _labels(configs: Sequence[str]) -> list[str]:
    """Each configuration's name, with #2, #3, ... on its later runs."""
    seen: dict[str, int] = {}
    labels = []
    for config in configs:
        seen[config] = seen.get(config, 0) + 1
        labels.append(config if seen[config] == 1 else f"{config}#{seen[config]}")
    return labels


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(line: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(line)
    print(text, flush=True)
    if out is not None:
        with out.open("a") as f:
            f.write(text + "\n")


def run(args: argparse.Namespace, each: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    import ray

    load_before = machine_load()
    started = time.monotonic()
    start_ray_and_tq()
    redis_proc = None
    results = []
    try:
        redis_proc, url = start_redis()
        with tempfile.TemporaryDirectory(prefix="tq-gc-live-") as tmp:
            bench = Bench(args, url, Path(tmp))
            bench.prepare()
            for config in args.configs:
                log(f"{config}: {args.window_seconds:g} s window")
                results.append({**bench.measure(config), "loop_jitter_ms": args.loop_jitter_ms})
                each(results[-1])
        if BASELINE in args.configs:
            each({**ratios(results, load_before), "loop_jitter_ms": args.loop_jitter_ms})
    finally:
        ray.shutdown()
        stop_process(redis_proc)
        log(f"done in {time.monotonic() - started:.0f} s")
    return results


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--window-seconds", type=float, default=60.0)
    parser.add_argument("--admissions", type=int, default=10_000)
    parser.add_argument("--manifests", type=int, default=4)
    parser.add_argument(
        "--configs",
        nargs="+",
        choices=CONFIGS,
        default=list(DEFAULT_CONFIGS),
        help="in this order; a configuration may run more than once (the baseline first and last gives "
        "the run's noise floor, baseline_spread)",
    )
    parser.add_argument(
        "--duty-cycle",
        type=float,
        help="the sidecar's duty cycle (start_sidecar's duty_cycle, `tq-gc --duty-cycle`), the one throttle "
        "of listings and deletes (default: 0.25)",
    )
    parser.add_argument(
        "--batch", type=int, help="the store's request and delete batch, FixedPacing.batch (default: 2000)"
    )
    parser.add_argument(
        "--quiet-ms",
        type=float,
        help="the store's quiet moments, FixedPacing.quiet_ms (default: 20; 0: no wait for quiet)",
    )
    parser.add_argument(
        "--sweeper-nice", type=int, default=0, help="run the tq-gc sidecar's process at this niceness (0-19)"
    )
    parser.add_argument(
        "--loop-jitter-ms",
        type=float,
        default=LOOP_JITTER_MS,
        help="each period of the job's loop is 50 ms +- this (0: exact periods, as runs before 2026-12-01)",
    )
    parser.add_argument(
        "--change-journal",
        action="store_true",
        help="start the tq-gc sidecars with the change journal (start_sidecar's change_journal, `tq-gc serve "
        "--change-journal`): each sweep after a sidecar's first re-reads only the rows changed since",
    )
    parser.add_argument("--out", type=Path, help="also append the JSON lines to this file (for plot_live)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    run(args, lambda line: emit(line, args.out))


if __name__ == "__main__":
    main()
