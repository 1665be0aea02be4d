"""The job's publishers: make-before-break moves of staging rows between an admission, a tag row and a
checkpoint manifest, through `AdmissionRegistry` on the shared Redis, TQ's own API and native manifest
files (written atomically, under a fence)."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from tq_gc import AdmissionRegistry
from tq_gc.errors import StoreRefused

from .actor_controls import ActorSwitches, Pace, RedisRestarts, Timing
from .job_tq import CANONICAL, STAGING, JobTq, route_plan_tags
from .manifest_files import write_manifest
from .truth import ADMISSION, MANIFEST, TAG, GroundTruth, Holder

log = logging.getLogger("soak")


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
        self.stats = {
            "created": 0,
            "moved": 0,
            "retired": 0,
            "readmitted": 0,
            "lapses": 0,
            "failed_steps": 0,
            "refused": 0,
        }

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
            except StoreRefused as exc:  # told at once: its rows are not protected any more
                log.debug("renew %s refused: %s", admission_id, exc)
                self._give_up(admission_id, held)
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

    def _give_up(self, admission_id: str, held: _Admission) -> None:
        """The store refused to renew `admission_id`: it protects its row only until its lease runs out,
        so the row is held no longer by it (an orphan, if it was its last reference)."""
        del self._admissions[admission_id]
        self.stats["refused"] += 1
        holder = Holder(ADMISSION, admission_id)
        row = self._rows.get(held.key)
        if row is None or holder not in row.holders:
            return
        row.holders.remove(holder)
        if row.holders:
            self._truth.remove_holder(row.key, holder)
            return
        self._truth.drop_last_holder(row.key, holder)
        del self._rows[row.key]
        self._truth.orphaned(row.key, held.renewed_at_s + self._timing.admission_ttl_seconds)

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
            # Every publisher counts from 1: `call-7` is held by several at once, each its own (holders).
            admission_id = f"call-{self._serial}"
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
        # One name for every publisher, as ranks fencing `ckpt-{step}`: each raises a fence of its own,
        # up until its own unfence, whoever else lowers theirs meanwhile.
        return "checkpoint"

    def _fence(self) -> None:
        self._registry.fence(self._fence_name, self._timing.fence_ttl_s)
