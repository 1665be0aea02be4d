"""A sweep's world for scenario tests: the memory row store and state on a manual clock, the registry,
checkpoint manifests in a temporary directory, and the job's canonical partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from tools.testbed.clock import ManualClock
from tq_gc.config import Config, parse_config
from tq_gc.publish.manifest import write_manifest
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import SweepReport
from tq_gc.stores.base import DELETE_BATCH_ROWS
from tq_gc.sweep import Collector

from support.baseline import with_old_baseline
from support.scripted_store import ScriptedRowStore, ScriptedState

STAGING = "rollout_staging"
DATA = "rollout_data"
GRACE_S = 60


class World:
    def __init__(self, tmp_path: Path, delete_batch_rows: int = DELETE_BATCH_ROWS, **config: Any) -> None:
        """`delete_batch_rows`: the row store's delete batches; `config`: the config's values."""
        self.tmp_path = tmp_path
        self.clock = ManualClock()
        self.state = ScriptedState("job-42", clock_ms=self.clock)
        with_old_baseline(self.state)  # a job swept for a while: its empty sources are judged, not skipped
        self.rows = ScriptedRowStore(delete_batch_rows=delete_batch_rows)
        self.registry = AdmissionRegistry(self.state)
        values: dict[str, Any] = {
            "namespace": "job-42",
            "scope": [{"partition": STAGING, "all_keys": True}],
            "grace_seconds": GRACE_S,
            "manifests": [{"glob": str(tmp_path / "ckpt" / "**" / "gc-manifest.json")}],
            "tag_references": [
                {
                    "partition": DATA,
                    "key_path": "route_assembly_plan.cleanup_staging_keys",
                    "target_partition": STAGING,
                }
            ],
            "limits": {"max_delete_fraction": 1.0},
        }
        values.update(config)
        self.config: Config = parse_config(values)
        # The job's layout at its first sweep: the checkpoint volume is mounted and the canonical
        # partition exists (a tag partition the store lacks fails its source closed).
        (tmp_path / "ckpt").mkdir(exist_ok=True)
        self.rows.put(DATA, "sample-0", {})

    def sweep(self, execute: bool = True, holder: str = "test", **kwargs: Any) -> SweepReport:
        return Collector(self.config, self.state, self.rows, holder=holder).sweep(
            dry_run=not execute, **kwargs
        )

    def staging(self) -> set[str]:
        return self.rows.keys(STAGING)

    def write_manifest(
        self, keys: list[str], state: Literal["active", "retired"] = "active", name: str = "ckpt-1"
    ) -> Path:
        path = self.tmp_path / "ckpt" / name / "gc-manifest.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_manifest(path, name, {STAGING: keys}, state)

    def age(self, seconds: float = GRACE_S) -> None:
        """Let time pass; by default exactly the grace (more, with no sweep between, is a gap in
        observation that restarts every clock)."""
        self.clock.advance(seconds)
