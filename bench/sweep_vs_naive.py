"""tq-gc's full safe sweep against the naive restore-time clear, side by side on a real TransferQueue.

    scripts/bench                       # 100k staging rows, half orphans, 10k admissions, 4 manifests
    scripts/bench --rows 20000 --repeats 3

Each repeat fills the same data set twice and, in alternating order, times
  (a) tq-gc: the deleting sweep (lease, fence, list, references, plan, per-batch lease renewal, identity
      re-check, admission and fence re-read, delete, audit), with every row's first sighting done by an
      earlier sweep (that marking sweep is timed too, and reported apart);
  (b) naive: list the partition, subtract the referenced set, kv_clear the rest in batches of 2000;
and prints the median ratio a/b, rows deleted per second, and each side's peak Python heap (tracemalloc,
measured in a separate untimed pass). Only ratios from one run mean anything on a noisy machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PARTITION = "rollout_staging"
BATCH = 2000
TQ_CONFIG = {
    "controller": {"polling_mode": True},
    "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {"num_data_storage_units": 2}},
}


@dataclass
class DataSet:
    rows: int
    admissions: int
    manifests: int
    manifest_dir: Path

    @property
    def keys(self) -> list[str]:
        return [f"r{i // 4:06d}_g0_a1/call{i % 4}" for i in range(self.rows)]

    def referenced(self) -> tuple[dict[str, list[str]], list[list[str]]]:
        """Half the rows are referenced: 4/5 of those by admissions, 1/5 by manifests."""
        held = self.keys[: self.rows // 2]
        by_admissions = held[: len(held) * 4 // 5]
        by_manifests = held[len(by_admissions) :]
        per_admission = max(1, len(by_admissions) // self.admissions)
        admissions = {
            f"adm-{i}": by_admissions[i * per_admission : (i + 1) * per_admission]
            for i in range(self.admissions)
        }
        per_manifest = -(-len(by_manifests) // self.manifests)
        manifests = [by_manifests[i * per_manifest : (i + 1) * per_manifest] for i in range(self.manifests)]
        return admissions, manifests


def fill(data: DataSet) -> None:
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    keys = data.keys
    for start in range(0, len(keys), BATCH):
        batch = keys[start : start + BATCH]
        fields = TensorDict(
            {"token_ids_delta": torch.zeros(len(batch), 16, dtype=torch.int32)}, batch_size=len(batch)
        )
        tags = [{"rollout_id": k.split("/")[0], "model_call_id": k} for k in batch]
        tq.kv_batch_put(keys=batch, partition_id=PARTITION, fields=fields, tags=tags)


def publish_references(data: DataSet, registry: Any) -> None:
    admissions, manifests = data.referenced()
    for admission_id, keys in admissions.items():
        registry.admit(admission_id, {PARTITION: keys}, ttl_seconds=3600)
    for i, keys in enumerate(manifests):
        path = data.manifest_dir / f"ckpt-{i}" / "gc-manifest.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "format": "tq-gc/manifest/v1",
            "manifest_id": f"ckpt-{i}",
            "state": "active",
            "rows": {PARTITION: keys},
        }
        path.write_text(json.dumps(doc))


def naive_clear(data: DataSet, registry: Any) -> int:
    """What a restore does today: list, subtract what is referenced now, clear the rest."""
    import transfer_queue as tq

    from tq_gc.references.manifests import ManifestsSource

    listed = tq.kv_list(PARTITION).get(PARTITION, {})
    referenced = {key for rows in registry.live().values() for key in rows.get(PARTITION, [])}
    referenced |= ManifestsSource(config_for(data).manifests).read().get(PARTITION, frozenset())
    doomed = [key for key in listed if key not in referenced]
    for start in range(0, len(doomed), BATCH):
        tq.kv_clear(doomed[start : start + BATCH], PARTITION)
    return len(doomed)


def config_for(data: DataSet, state_url: str = "memory://") -> Any:
    from tq_gc.config import parse_config

    return parse_config(
        {
            "namespace": "bench",
            "state_url": state_url,
            "scope": [{"partition": PARTITION, "all_keys": True}],
            "grace_seconds": 60,
            "manifests": [{"glob": f"{data.manifest_dir}/**/gc-manifest.json"}],
            "limits": {"max_deletes_per_run": 10_000_000, "delete_batch": BATCH, "max_delete_fraction": 0.6},
        }
    )


class Sides:
    """Both contestants over one attached row store and one state store."""

    def __init__(self, data: DataSet, state_url: str) -> None:
        from tq_gc.references.admissions import AdmissionRegistry
        from tq_gc.state import open_state
        from tq_gc.state.memory import ManualClock, MemoryState
        from tq_gc.stores import attach_transfer_queue

        self.data = data
        self.config = config_for(data, state_url)
        self.clock = ManualClock(start_ms=int(time.time() * 1000))
        self.state = (
            MemoryState("bench", clock_ms=self.clock)
            if state_url == "memory://"
            else open_state(state_url, "bench")
        )
        self.rows = attach_transfer_queue(self.config)
        self.registry = AdmissionRegistry(self.state)

    def reset(self) -> None:
        import transfer_queue as tq

        leftover = list(tq.kv_list(PARTITION).get(PARTITION, {}))
        for start in range(0, len(leftover), BATCH):
            tq.kv_clear(leftover[start : start + BATCH], PARTITION)
        for admission_id in list(self.registry.live()):
            self.registry.release(admission_id)
        fill(self.data)
        publish_references(self.data, self.registry)

    def mark(self) -> float:
        from tq_gc.collector import Collector

        started = time.perf_counter()
        report = Collector(self.config, self.state, self.rows, holder="bench").sweep(dry_run=False)
        assert report.counts.within_grace == self.data.rows // 2, report.to_dict()
        self._let_grace_pass()
        return time.perf_counter() - started

    def _let_grace_pass(self) -> None:
        if hasattr(self.state, "clock_ms") and self.state.clock_ms is self.clock:
            self.clock.advance(self.config.grace_seconds + 1)
        else:  # Redis: its own clock; move the records back instead of waiting 60 s
            shift_first_seen(self.state, PARTITION, int(self.config.grace_seconds * 1000) + 1000)

    def tq_gc(self) -> int:
        from tq_gc.collector import Collector

        report = Collector(self.config, self.state, self.rows, holder="bench").sweep(dry_run=False)
        assert report.outcome.value == "completed", report.to_dict()
        self.last_phases_ms = report.phases_ms
        return report.counts.deleted

    def naive(self) -> int:
        return naive_clear(self.data, self.registry)


def shift_first_seen(state: Any, partition: str, by_ms: int) -> None:
    from tq_gc.model import FirstSeen

    records = state.load_first_seen(partition)
    lease = state.acquire_lease("bench", 60_000)
    shifted = {k: FirstSeen(v.at_ms - by_ms, v.identity) for k, v in records.items()}
    state.save_first_seen(lease, partition, shifted, [], observed_ms=state.now_ms())
    state.release_lease(lease)


def _rounded(phases: dict[str, float]) -> dict[str, int]:
    return {name: round(ms) for name, ms in phases.items()}


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    gc.collect()
    started = time.perf_counter()
    deleted = fn()
    return time.perf_counter() - started, deleted


def peak_heap(prepare: Callable[[], Any], fn: Callable[[], int]) -> float:
    prepare()
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def run(args: argparse.Namespace, state_url: str, manifest_dir: Path) -> dict[str, Any]:
    data = DataSet(args.rows, args.admissions, args.manifests, manifest_dir)
    sides = Sides(data, state_url)
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
        "tq_gc_peak_heap_mib": round(heap_a, 1),
        "naive_peak_heap_mib": round(heap_b, 1),
    }


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    import shutil
    import socket

    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server not found: install it (apt-get install redis-server) or pass --state memory")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    import redis

    for _ in range(100):
        try:
            redis.Redis(port=port).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--admissions", type=int, default=10_000)
    parser.add_argument("--manifests", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--state", choices=["memory", "redis", "both"], default="both")
    args = parser.parse_args()

    # TQ sets each of its loggers' level from this when the logger is made: set it before importing TQ,
    # or every put logs a warning about this machine's 2 cores.
    os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")
    import ray
    import torch  # noqa: F401  (CPU torch before transfer_queue)
    import transfer_queue as tq

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    redis_proc = None
    try:
        tq.init(TQ_CONFIG)
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
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)
        ray.shutdown()


if __name__ == "__main__":
    main()
