"""A toy RL training job that leaks TransferQueue rows the way the real one does.

It writes through TQ's own API and references rows through the admission registry and checkpoint
manifests, exactly as publishers would. `tq-gc demo`, the leak-scenario tests and the benchmark all
play it, and each knows in advance which rows must survive and which are orphans.

Story, in the order `LeakScenario` plays it:
  1. generation: rollouts stage one row per model call, each call admitted while it runs; canonical
     samples in `rollout_data`, some naming staging rows in their route plan (a row-to-row reference)
  2. checkpoint: under a fence, running calls are cut into prefix chunks named by an active manifest
  3. restore: one restored call takes its chunks in its admission (normal lane); two are in the forest
     lane, whose rebuilt admission drops the cut, and the manifest is retired: their chunks are orphans
  4. abandoned attempts release their admissions and leave their rows; a put dies leaving a ghost key;
     a warm-up `__schema__:` key survives a crash
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tq_gc.publish.manifest import write_manifest
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.rows import RowId

STAGING = "rollout_staging"
CANONICAL = "rollout_data"
CHECKPOINT = "ckpt-000123"
TOKENS = 16


@dataclass
class Fates:
    """What must happen to each row the scenario wrote."""

    kept: dict[RowId, str] = field(default_factory=dict)  # row -> why it must survive
    orphans: dict[RowId, str] = field(default_factory=dict)  # row -> how it was orphaned

    def keep(self, rows: Iterable[RowId], why: str) -> None:
        for row in rows:
            self.orphans.pop(row, None)
            self.kept[row] = why

    def orphan(self, rows: Iterable[RowId], how: str) -> None:
        for row in rows:
            self.kept.pop(row, None)
            self.orphans[row] = how


class LeakScenario:
    def __init__(
        self,
        registry: AdmissionRegistry,
        manifest_dir: Path,
        groups: int = 3,
        samples: int = 2,
        seed: int = 0,
    ) -> None:
        self.registry = registry
        self.manifest_dir = manifest_dir
        self.groups = groups
        self.samples = samples
        self.fates = Fates()
        self.admission_ttl_seconds = 600.0
        self._ids = (f"{seed:x}{i:05x}" for i in range(1_000_000))

    # -- the story ----------------------------------------------------------------------------

    def generation(self) -> list[str]:
        """Rollouts run: each call stages a row, admitted while it runs."""
        for group in range(self.groups):
            for sample in range(self.samples):
                rollout = f"g{group}_g{sample}_a{next(self._ids)}"
                keys = [f"{rollout}/call{c}" for c in range(2)]
                self._put(STAGING, keys, [{"rollout_id": rollout, "model_call_id": k} for k in keys])
                self.registry.admit(f"live-{rollout}", {STAGING: keys}, self.admission_ttl_seconds)
                self.fates.keep(_rows(STAGING, keys), "live admission")
        self._canonical_samples()
        return [f"{self.groups * self.samples} rollouts staged {self.groups * self.samples * 2} call rows"]

    def _canonical_samples(self) -> None:
        planned = f"g0_g0_a{next(self._ids)}/final"
        self._put(STAGING, [planned], [{"rollout_id": "planned"}])
        keys = [f"{uuid.UUID(int=i + 1)}_g{s}" for i in range(self.groups) for s in range(self.samples)]
        tags: list[dict[str, Any]] = [{"group": k} for k in keys]
        tags[0]["route_assembly_plan"] = {"cleanup_staging_keys": [planned]}
        self._put(CANONICAL, keys, tags)
        self.fates.keep(_rows(CANONICAL, keys), "canonical partition: never in scope")
        self.fates.keep(_rows(STAGING, [planned]), "named by a canonical row's route plan")

    def checkpoint(self, running: int = 3, chunks: int = 2) -> list[str]:
        """A checkpoint cuts running calls into prefix chunks, named by an active manifest."""
        self.registry.fence(CHECKPOINT, ttl_seconds=60)
        try:
            self.cut_calls = [f"r{next(self._ids)}/call0" for _ in range(running)]
            self.chunk_keys = {
                call: [f"__generation_cut__/{CHECKPOINT}/{call}/{seq}" for seq in range(chunks)]
                for call in self.cut_calls
            }
            all_chunks = [k for keys in self.chunk_keys.values() for k in keys]
            self._put(STAGING, all_chunks, [{"checkpoint": CHECKPOINT} for _ in all_chunks])
            self.write_manifest("active", all_chunks)
            self.fates.keep(_rows(STAGING, all_chunks), "active checkpoint manifest")
        finally:
            self.registry.unfence(CHECKPOINT)
        return [f"checkpoint {CHECKPOINT}: {running} running calls cut into {len(all_chunks)} chunk rows"]

    def restore(self) -> list[str]:
        """Restored calls are admitted (make-before-break), then the manifest is retired."""
        normal, *forest = self.cut_calls
        self.registry.admit(
            f"restored-{normal}", {STAGING: self.chunk_keys[normal]}, self.admission_ttl_seconds
        )
        self.fates.keep(_rows(STAGING, self.chunk_keys[normal]), "restored call's admission (normal lane)")
        for call in forest:
            # The forest lane rebuilds the admission without the generation cut: nothing holds the chunks.
            self.registry.admit(f"restored-{call}", {STAGING: []}, self.admission_ttl_seconds)
            self.fates.orphan(
                _rows(STAGING, self.chunk_keys[call]), "prefix chunk dropped by the forest lane"
            )
        self.write_manifest("retired", [])
        dropped = sum(len(self.chunk_keys[c]) for c in forest)
        return [f"restore: 1 call resumed from its chunks, {len(forest)} forest-lane calls dropped {dropped}"]

    def abandon(self, attempts: int = 2) -> list[str]:
        """Attempts fail: their admissions go, their staging rows stay. A put dies; a warm-up key stays."""
        live = sorted(a for a in self.registry.live() if a.startswith("live-"))
        for admission_id in live[:attempts]:
            keys = self.registry.live()[admission_id][STAGING]
            self.registry.release(admission_id)
            self.fates.orphan(_rows(STAGING, keys), "abandoned attempt")
        ghost = f"r{next(self._ids)}/call9"
        self._put(STAGING, [ghost], [{"rollout_id": "ghost"}], with_data=False)
        warmup = f"__schema__:{STAGING}:warmup"
        self._put(STAGING, [warmup], [{}])
        self.fates.orphan(_rows(STAGING, [ghost]), "ghost key of an interrupted put")
        self.fates.orphan(_rows(STAGING, [warmup]), "warm-up key left by a crash")
        return [f"{attempts} attempts abandoned, a ghost key and a warm-up key left behind"]

    def play(self) -> list[str]:
        return [*self.generation(), *self.checkpoint(), *self.restore(), *self.abandon()]

    # -- I/O ----------------------------------------------------------------------------------

    def write_manifest(self, state: Literal["active", "retired"], keys: list[str]) -> Path:
        path = self.manifest_dir / CHECKPOINT / "gc-manifest.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_manifest(path, CHECKPOINT, {STAGING: keys}, state)

    @staticmethod
    def _put(partition: str, keys: list[str], tags: list[dict[str, Any]], with_data: bool = True) -> None:
        put_rows(partition, keys, tags, with_data)


def put_rows(partition: str, keys: list[str], tags: list[dict[str, Any]], with_data: bool = True) -> None:
    """Write rows through TQ's own API (a put without data leaves a ghost key: listed, unreadable)."""
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    fields = None
    if with_data:
        deltas = torch.zeros(len(keys), TOKENS, dtype=torch.int32)
        fields = TensorDict({"token_ids_delta": deltas}, batch_size=len(keys))
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=fields, tags=tags)


def _rows(partition: str, keys: Iterable[str]) -> list[RowId]:
    return [RowId(partition, key) for key in keys]
