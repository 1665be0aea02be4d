"""The training job the soak plays: its TransferQueue, make-before-break publishers and orphan leakers.

Everything here goes through public surfaces only: TQ's own API (this process created the TQ),
`AdmissionRegistry` on the shared Redis, and native manifest files (written atomically, under a fence).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tq_gc import AdmissionRegistry

from .truth import ADMISSION, MANIFEST, TAG, GroundTruth, Holder

log = logging.getLogger("soak")

STAGING = "rollout_staging"
CANONICAL = "rollout_data"
ROUTE_PLAN_KEY_PATH = "route_assembly_plan.cleanup_staging_keys"
KINDS = (ADMISSION, TAG, MANIFEST)


class JobTq:
    """The soak's TransferQueue (created by this process, which plays the training job). TQ's
    module-level client is shared by every thread here, so calls are serialized."""

    def __init__(self, tq: Any) -> None:
        self._tq = tq
        self._lock = threading.Lock()

    def put(self, partition: str, keys: Sequence[str], tags: Sequence[dict[str, Any]]) -> None:
        import torch
        from tensordict import TensorDict

        fields = TensorDict({"token_ids_delta": torch.zeros(len(keys), 8, dtype=torch.int32)}, len(keys))
        with self._lock:
            self._tq.kv_batch_put(keys=list(keys), partition_id=partition, fields=fields, tags=list(tags))

    def clear(self, partition: str, keys: Sequence[str]) -> None:
        with self._lock:
            self._tq.kv_clear(list(keys), partition)

    def keys(self, partition: str) -> set[str]:
        with self._lock:
            return set(self._tq.kv_list(partition).get(partition, {}))

    def exists(self, partition: str, key: str) -> bool:
        with self._lock:
            meta = self._tq.get_client().kv_retrieve_meta([key], partition, create=False)
        return len(meta.global_indexes) == 1


def write_manifest(
    path: Path, manifest_id: str, rows: dict[str, Sequence[str]], state: str = "active"
) -> None:
    """A native tq-gc/manifest/v1 file, written atomically: a reader sees the old file or the new one."""
    doc = {
        "format": "tq-gc/manifest/v1",
        "manifest_id": manifest_id,
        "state": state,
        "rows": {partition: sorted(keys) for partition, keys in rows.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def route_plan_tags(staging_keys: Sequence[str]) -> dict[str, Any]:
    return {"route_assembly_plan": {"cleanup_staging_keys": list(staging_keys)}, "weight_version": 1}


@dataclass
class RedisRestarts:
    """How many times the chaos restarted Redis: tells a lease lost to a restart from a late renew."""

    count: int = 0


@dataclass
class Timing:
    admission_ttl_seconds: float
    renew_every_s: float
    fence_ttl_s: float
    tick_s: float  # the leaker's pace


@dataclass(frozen=True)
class Pace:
    """How a publisher behaves: one create, move or retire per `tick_s`; `rows_held` rows at a time,
    each moved `moves_per_row` times (a range) before it is retired; moves between `kinds`. With
    `switch_kind` every move goes to another kind (a hot row flips admission <-> tag back to back).
    With `fenced_manifests` manifests change only while the job checkpoints, under its fence; without,
    at any time, each move inside the admission the protocol asks for."""

    tick_s: float
    rows_held: int
    moves_per_row: tuple[int, int]
    kinds: tuple[str, ...] = KINDS
    switch_kind: bool = False
    fenced_manifests: bool = True

    def next_kind(self, rng: random.Random, current: str, manifests: bool = True) -> str:
        """The kind of a row's next reference; a manifest only when `manifests` (a checkpoint is on)."""
        kinds = [kind for kind in self.kinds if manifests or kind != MANIFEST]
        if self.switch_kind:
            return rng.choice([kind for kind in kinds if kind != current])
        return rng.choice(kinds)


@dataclass
class _Row:
    key: str
    holders: list[Holder]
    moves_left: int


@dataclass
class _Admission:
    key: str
    renewed_at_s: float
    restarts_seen: int


@dataclass
class ActorSwitches:
    """Set by the soak's driver: `chaos` off stops moves and leaks (references are kept and renewed);
    `stop` ends the thread."""

    chaos: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    # Set while the job checkpoints: manifests change (under fences) only then, as in a real job,
    # which checkpoints every so often; between checkpoints, sweeps have fence-free stretches to delete in.
    checkpointing: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


class Publisher(threading.Thread):
    """Holds a few staging rows and moves each between an admission, a tag row and its checkpoint
    manifest, make-before-break: the new reference is in place before the old one is removed. After a
    few moves a row is retired (its last reference dropped: an orphan) and a new one is created."""

    def __init__(
        self,
        number: int,
        seed: int,
        tq: JobTq,
        registry: AdmissionRegistry,
        manifest_dir: Path,
        truth: GroundTruth,
        timing: Timing,
        restarts: RedisRestarts,
        switches: ActorSwitches,
        pace: Pace,
    ) -> None:
        super().__init__(name=f"publisher-{number}", daemon=True)
        self.number = number
        self._rng = random.Random(seed)
        self._tq, self._registry, self._truth = tq, registry, truth
        self._timing, self._restarts, self._switches = timing, restarts, switches
        self._pace = pace
        # Two checkpoints kept at a time, like a job that prunes to the newest k: a row can move
        # from one manifest to the other.
        self._manifests: dict[str, set[str]] = {
            str(manifest_dir / f"publisher-{number}" / slot / "gc-manifest.json"): set() for slot in "ab"
        }
        self._rows: dict[str, _Row] = {}
        self._admissions: dict[str, _Admission] = {}
        self._serial = 0
        self._renewed_at_s = 0.0
        self.stats = {"created": 0, "moved": 0, "retired": 0, "readmitted": 0, "lapses": 0, "failed_steps": 0}

    def run(self) -> None:
        try:
            while not self._switches.stop.is_set():
                if self._truth.now_s() - self._renewed_at_s >= self._timing.renew_every_s:
                    self._renew_all()
                if self._switches.chaos.is_set():
                    self._step()
                self._switches.stop.wait(self._pace.tick_s * self._rng.uniform(0.5, 1.5))
        except Exception as exc:  # a soak bug: the verdict is void, say so
            log.exception("%s crashed", self.name)
            self._switches.errors.append(f"{self.name}: {type(exc).__name__}: {exc}")

    # -- renewing: a lost admission (Redis restarted empty, or a late renew) is re-admitted at once ---

    def _renew_all(self) -> None:
        self._renewed_at_s = self._truth.now_s()
        for admission_id, held in list(self._admissions.items()):
            try:
                if not self._registry.renew(admission_id, self._timing.admission_ttl_seconds):
                    self._readmit(admission_id, held)
                    continue
            except Exception as exc:  # Redis down: try again next round
                log.debug("renew %s failed: %s", admission_id, exc)
                continue
            held.renewed_at_s, held.restarts_seen = self._truth.now_s(), self._restarts.count

    def _readmit(self, admission_id: str, held: _Admission) -> None:
        now_s = self._truth.now_s()
        restarted = self._restarts.count != held.restarts_seen
        why = "Redis restarted" if restarted else "LAPSE: renewed too late, the soak's own fault"
        self._registry.admit(admission_id, {STAGING: [held.key]}, self._timing.admission_ttl_seconds)
        since_s = now_s - held.renewed_at_s
        held.renewed_at_s, held.restarts_seen = now_s, self._restarts.count
        self.stats["readmitted" if restarted else "lapses"] += 1
        self._truth.note(held.key, f"re-admitted {admission_id} ({why}; last renewed {since_s:.1f} s before)")

    # -- one step: create, move or retire a row ------------------------------------------------------

    def _step(self) -> None:
        try:
            if len(self._rows) < self._pace.rows_held:
                self._create()
                return
            row = self._rng.choice(list(self._rows.values()))
            if row.holders[0].kind == MANIFEST and not self._manifests_writable():
                return  # moved out of (or dropped from) its manifest at the next checkpoint
            if row.moves_left > 0:
                self._move(row)
            else:
                self._retire(row)
        except Exception as exc:  # Redis restarting, a fence refused: nothing half-done, retry later
            self.stats["failed_steps"] += 1
            log.debug("%s: step failed: %s: %s", self.name, type(exc).__name__, exc)

    def _create(self) -> None:
        self._serial += 1
        key = f"p{self.number}_{uuid.uuid4().hex[:8]}_g0_a{self._serial:x}/call{self._rng.randint(0, 9)}"
        self._truth.new_row(key, "published")
        holder = self._add(key, ADMISSION)  # admit, then write the row that it names
        self._truth.add_holder(key, holder)
        try:
            self._tq.put(STAGING, [key], [{"rollout_id": key.split("/")[0], "schema_version": 1}])
        except Exception:
            self._admissions.pop(holder.name)  # never written: its admission just expires
            raise
        self._truth.written(key)
        self._rows[key] = _Row(key, [holder], self._rng.randint(*self._pace.moves_per_row))
        self.stats["created"] += 1

    def _manifests_writable(self) -> bool:
        return self._switches.checkpointing.is_set() or not self._pace.fenced_manifests

    def _move(self, row: _Row) -> None:
        """Make-before-break by the protocol (`GcClient.holding`): inside an admission of the row, unless
        the new reference is an admission itself (admitted before the old one goes)."""
        old = row.holders[0]
        kind = self._pace.next_kind(self._rng, old.kind, self._manifests_writable())
        hop = self._add(row.key, ADMISSION) if kind != ADMISSION else None
        if hop is not None:
            self._truth.add_holder(row.key, hop)
        try:
            new = self._add(row.key, kind)  # make ...
            self._truth.add_holder(row.key, new)
            row.holders.append(new)
            self._truth.moved(row.key, old.kind, new.kind)
            row.moves_left -= 1
            self.stats["moved"] += 1
            self._remove(row.key, old)  # ... before break
            row.holders.remove(old)
            self._truth.remove_holder(row.key, old)
        finally:
            if hop is not None:  # the truth lets go first: it never claims more than Redis holds
                self._truth.remove_holder(row.key, hop)
                self._remove(row.key, hop)

    def _retire(self, row: _Row) -> None:
        while len(row.holders) > 1:  # a break that failed earlier
            self._remove(row.key, row.holders[0])
            self._truth.remove_holder(row.key, row.holders.pop(0))
        last = row.holders[0]
        fenced = last.kind == MANIFEST and self._pace.fenced_manifests
        if fenced:
            self._fence()  # before the check: a refused fence must leave the row referenced
        if not self._tq.exists(STAGING, row.key):  # about to drop its last reference: is it still there?
            self._truth.violation(row.key, "publisher, before dropping the last reference")
        self._truth.drop_last_holder(row.key, last)
        try:
            expires_s = self._remove(row.key, last, fenced=fenced)
        except Exception:
            self._truth.keep_last_holder(row.key, last)
            raise
        del self._rows[row.key]
        self._truth.orphaned(row.key, expires_s)
        self.stats["retired"] += 1

    # -- references: add and remove one ----------------------------------------------------------------

    def _add(self, key: str, kind: str) -> Holder:
        self._serial += 1
        if kind == ADMISSION:
            admission_id = f"publisher-{self.number}-{self._serial}"
            self._registry.admit(admission_id, {STAGING: [key]}, self._timing.admission_ttl_seconds)
            now_s = self._truth.now_s()
            self._admissions[admission_id] = _Admission(key, now_s, self._restarts.count)
            return Holder(ADMISSION, admission_id)
        if kind == TAG:
            sample = f"{uuid.uuid4().hex[:12]}_g{self._serial % 8}"
            self._tq.put(CANONICAL, [sample], [route_plan_tags([key])])
            return Holder(TAG, sample)
        free = [path for path, keys in self._manifests.items() if key not in keys]
        if not free:
            return self._add(key, ADMISSION)
        path = self._rng.choice(free)
        self._rewrite_manifest(path, self._manifests[path] | {key})
        return Holder(MANIFEST, path)

    def _remove(self, key: str, holder: Holder, fenced: bool = False) -> float | None:
        """Remove one reference; returns when it stops protecting the row if that is later than now (an
        admission whose release failed protects it until its lease runs out)."""
        if holder.kind == ADMISSION:
            held = self._admissions.pop(holder.name)
            try:
                self._registry.release(holder.name)
            except Exception:  # not renewed any more: it expires by itself
                return held.renewed_at_s + self._timing.admission_ttl_seconds
            return None
        if holder.kind == TAG:
            self._tq.clear(CANONICAL, [holder.name])
            return None
        self._rewrite_manifest(holder.name, self._manifests[holder.name] - {key}, fenced=fenced)
        return None

    def _rewrite_manifest(self, path: str, keys: set[str], fenced: bool = False) -> None:
        """A checkpoint: fence, write the manifest (tmp + rename), unfence. A hot publisher writes
        without a fence (each move is inside an admission), and removes an emptied manifest by unlink
        or by retiring it."""
        fence = self._pace.fenced_manifests and not fenced
        if fence:
            self._fence()
        manifest_id = f"publisher-{self.number}-ckpt-{self._serial}"
        if keys or self._pace.fenced_manifests:
            write_manifest(Path(path), manifest_id, {STAGING: sorted(keys)})
        elif self._rng.random() < 0.5:
            Path(path).unlink(missing_ok=True)
        else:
            write_manifest(Path(path), manifest_id, {STAGING: []}, state="retired")
        self._manifests[path] = set(keys)
        if fence:
            with contextlib.suppress(Exception):  # Redis down: the fence lapses after its TTL
                self._registry.unfence(self._fence_name)

    @property
    def _fence_name(self) -> str:
        return f"checkpoint-publisher-{self.number}"

    def _fence(self) -> None:
        self._registry.fence(self._fence_name, self._timing.fence_ttl_s)


class Leaker(threading.Thread):
    """Leaves orphans the way the job does: staging rows nobody references (abandoned attempts, prefix
    chunks of a restored call nobody uses), and admissions that are never renewed (a dead worker)."""

    def __init__(
        self,
        seed: int,
        tq: JobTq,
        registry: AdmissionRegistry,
        truth: GroundTruth,
        timing: Timing,
        switches: ActorSwitches,
    ) -> None:
        super().__init__(name="leaker", daemon=True)
        self._rng = random.Random(seed)
        self._tq, self._registry, self._truth = tq, registry, truth
        self._timing, self._switches = timing, switches
        self.stats: dict[str, int] = {"leaked": 0, "abandoned": 0, "failed_steps": 0}

    def run(self) -> None:
        try:
            while not self._switches.stop.is_set():
                if self._switches.chaos.is_set():
                    self._step()
                self._switches.stop.wait(self._timing.tick_s * 2 * self._rng.uniform(0.5, 1.5))
        except Exception as exc:
            log.exception("leaker crashed")
            self._switches.errors.append(f"leaker: {type(exc).__name__}: {exc}")

    def _step(self) -> None:
        try:
            if self._rng.random() < 0.15:
                self._abandon_admission()
            else:
                self._leak(self._rng.randint(1, 4))
        except Exception as exc:
            self.stats["failed_steps"] += 1
            log.debug("leaker: step failed: %s: %s", type(exc).__name__, exc)

    def _leak(self, n: int) -> None:
        checkpoint = uuid.uuid4().hex[:6]
        keys = [f"__generation_cut__/ckpt-{checkpoint}/r{i}_g0_a1/call{i}/0" for i in range(n)]
        if self._rng.random() < 0.5:
            keys = [f"{uuid.uuid4().hex[:8]}_g{i}_a{uuid.uuid4().hex[:4]}/call0" for i in range(n)]
        for key in keys:
            self._truth.new_row(key, "leaked")
        self._tq.put(STAGING, keys, [{"schema_version": 1}] * n)
        for key in keys:
            self._truth.written(key)
        self.stats["leaked"] += n

    def _abandon_admission(self) -> None:
        key = f"dead{uuid.uuid4().hex[:8]}_g0_a1/call0"
        admission_id = f"dead-worker-{uuid.uuid4().hex[:8]}"
        self._truth.new_row(key, "abandoned")
        admitted_s = self._truth.now_s()
        ttl_s = self._timing.admission_ttl_seconds
        self._registry.admit(admission_id, {STAGING: [key]}, ttl_s)
        self._truth.add_holder(key, Holder(ADMISSION, admission_id))
        self._tq.put(STAGING, [key], [{"schema_version": 1}])
        self._truth.written(key)
        # The lease runs out ttl_s after the admit reached Redis: somewhere in [admitted_s, now + ttl_s].
        self._truth.abandoned(
            key, referenced_until_s=admitted_s + ttl_s - 0.5, orphan_since_s=self._truth.now_s() + ttl_s
        )
        self.stats["abandoned"] += 1
