"""The job's orphan leaker: staging rows nothing references, and admissions it never renews."""

from __future__ import annotations

import logging
import random
import threading
import uuid

from tq_gc import AdmissionRegistry

from .actor_controls import ActorSwitches, Timing
from .job_tq import STAGING, JobTq
from .truth import ADMISSION, GroundTruth, Holder

log = logging.getLogger("soak")


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
