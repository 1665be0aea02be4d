"""What both benchmarks share: the data set, a real TQ to put it in, a Redis for tq-gc's state, the naive
restore-time clear, and the machine's load (these machines are shared: every figure goes with it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
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

    def orphans(self) -> list[str]:
        return self.keys[self.rows // 2 :]


def quiet_tq() -> None:
    """TQ sets each of its loggers' level from this when the logger is made: set it before importing TQ
    (and before Ray starts its workers, which inherit it), or every put logs a warning about 2 cores."""
    os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")


def start_ray_and_tq() -> Any:
    """A local Ray cluster and a TQ created by this process (the training job's driver). Returns tq."""
    quiet_tq()
    import ray
    import torch  # noqa: F401  (CPU torch before transfer_queue)
    import transfer_queue as tq

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    tq.init(TQ_CONFIG)
    return tq


def tags_for(key: str) -> dict[str, str]:
    """The tags every benchmark row is written with."""
    return {"rollout_id": key.split("/")[0], "model_call_id": key}


def put_rows(keys: list[str], partition: str = PARTITION) -> None:
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    for start in range(0, len(keys), BATCH):
        batch = keys[start : start + BATCH]
        fields = TensorDict(
            {"token_ids_delta": torch.zeros(len(batch), 16, dtype=torch.int32)}, batch_size=len(batch)
        )
        tags = [tags_for(key) for key in batch]
        tq.kv_batch_put(keys=batch, partition_id=partition, fields=fields, tags=tags)


def clear_rows(keys: list[str], partition: str = PARTITION) -> None:
    import transfer_queue as tq

    for start in range(0, len(keys), BATCH):
        tq.kv_clear(keys[start : start + BATCH], partition)


def fill(data: DataSet) -> None:
    put_rows(data.keys)


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


def config_for(data: DataSet, state_url: str = "memory://", **overrides: Any) -> Any:
    from tq_gc.config import parse_config

    raw: dict[str, Any] = {
        "namespace": "bench",
        "state_url": state_url,
        "scope": [{"partition": PARTITION, "all_keys": True}],
        "grace_seconds": 60,
        "manifests": [{"glob": f"{data.manifest_dir}/**/gc-manifest.json"}],
        "limits": {"max_deletes_per_run": 10_000_000, "max_delete_fraction": 0.6},
    }
    raw.update(overrides)
    return parse_config(raw)


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


def shift_first_seen(state: Any, partition: str, by_ms: int) -> None:
    """Move a partition's first-seen records `by_ms` into the past (Redis has its own clock)."""
    from tq_gc.first_seen import FirstSeen

    records = state.load_first_seen(partition)
    lease = state.acquire_lease("bench", 60_000)
    shifted = {k: FirstSeen(v.at_ms - by_ms, v.identity) for k, v in records.items()}
    state.save_first_seen(lease, partition, shifted, [], observed_ms=state.now_ms())
    state.release_lease(lease)


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
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


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.terminate()
        proc.wait(10)


def slowest_1pct(latencies: list[float]) -> list[int]:
    """The indexes of the slowest 1% of iterations (at least one), slowest last."""
    return sorted(range(len(latencies)), key=latencies.__getitem__)[-max(1, len(latencies) // 100) :]


def machine_load() -> dict[str, Any]:
    """The 1/5/15-minute load averages and the core count: a figure from a busy machine says so."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "load_15m": round(fifteen, 2),
            "cores": os.cpu_count()}  # fmt: skip


def fixed_pacing(batch: int | None = None, quiet_ms: float | None = None) -> Any:
    """The TransferQueue store's fixed pacing (not settings: FixedPacing), with the bench's --batch and
    --quiet-ms where given."""
    from dataclasses import replace

    from tq_gc.stores.transferqueue.pacing import FIXED_PACING

    given = {"batch": batch, "quiet_ms": quiet_ms}
    return replace(FIXED_PACING, **{name: value for name, value in given.items() if value is not None})


def paced_row_store(fixed: Any, config: Any, options: Any) -> Any:
    """A row store factory for the sidecar (functools.partial(paced_row_store, fixed)): the job's TQ,
    attached as the sidecar's own attach does (tq_gc.wiring.StoreOptions: its duty cycle, its change
    journal) with `fixed` pacing. Module-level, so Ray's workers import it by name."""
    from tq_gc.stores import attach_transfer_queue

    return attach_transfer_queue(config, options, fixed=fixed)
