"""Pacing tq-gc's requests to the job's TransferQueue controller, which serves one request at a time.

Every request tq-gc makes holds the controller for its duration, and the job's own requests queue
behind it. Two rules keep that short and rare, both from the latency tq-gc observes itself:

- **Adaptive window** (additive increase, multiplicative decrease, as TCP and etcd's compaction
  batches): a request slower than `target_seconds` halves the number of rows the next one asks for; one
  under half the target grows it by a quarter, between `min_window` and `max_window`.
- **Duty cycle**: after a request that took t seconds, pause t * (1 - duty) / duty, so tq-gc's
  requests take at most `duty` of the wall time (0.5: a pause as long as the request). A loaded
  controller answers slower, and tq-gc then pauses longer: it backs off by itself.

The duty cycle is the one throttle, of listings and deletes alike. It is chosen where the process starts
(`tq-gc --duty-cycle`, start_sidecar's duty_cycle), not in the config: DUTY_CYCLE without it.

Pure: the store measures, the pacer decides, and the store sleeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The duty cycle of a process that chose none: a sidecar, which sweeps beside the job's own steps. After a
# request of t seconds it pauses 3t, so a job request finds one of tq-gc's in progress at most a quarter
# of the time (docs/performance.md). A CronJob or a manual sweep from another node may choose 1 (no pause).
DUTY_CYCLE = 0.25

# The most keys (or global indexes) one request asks for, and the most rows one delete batch carries
# (each re-checked right before its clear): pacing adapts each request's size between a quarter of this
# and this. A request of this many keys holds the controller's request thread for its whole length: tens
# of ms at 2,000, seconds at a million.
BATCH = 2000
# A request slower than this halves the next one's size: how long tq-gc may hold the job's controller in
# one go. 10 ms: windows of ~1,000-2,000 rows at 1M rows, each holding the controller under 10 ms
# (docs/performance.md, "Cost to the training job").
REQUEST_TARGET_MS = 10.0
# Before each request (a listing window, a delete batch), wait until the controller's request thread has
# served nothing for this long (quiet.py): the job's steps come in bursts, and a request made between two
# of them is over before the next. Deletes then go in batches of BATCH/4. 20: above the gaps within a
# step measured here (under 10 ms). Tests and benches set 0 (never wait; delete batches of BATCH).
QUIET_MS = 20.0
# The longest wait for a quiet moment. The wait runs on the controller's actor thread, so this is how
# long the job's own calls to that thread may queue behind it.
QUIET_WAIT_MAX_MS = 250.0
# A job that has made no request for this long is idle (quiet.py): tq-gc's requests then go at once, in
# whole batches of BATCH, with no duty cycle's pause. Longer than any gap between a step's bursts.
JOB_IDLE_MS = 250.0


@dataclass
class Pacer:
    window: int
    min_window: int
    max_window: int
    target_seconds: float
    duty: float

    def __post_init__(self) -> None:
        if not 0 < self.duty <= 1:
            raise ValueError(f"duty must be in (0, 1], got {self.duty}")
        if not 1 <= self.min_window <= self.max_window:
            raise ValueError(f"need 1 <= min_window <= max_window, got {self.min_window}, {self.max_window}")
        self.window = min(max(self.window, self.min_window), self.max_window)

    @classmethod
    def starting_small(cls, max_window: int, target_seconds: float, duty: float) -> Pacer:
        """A pacer that starts at half of `max_window` and may go down to a quarter of it. Not lower: a
        request has a fixed cost too (a round trip, and the wait behind the job's own requests, both in
        the latency tq-gc sees), so tiny windows never look fast enough to grow again. Measured: with a
        floor of a sixteenth, a 1M-row listing at 2 cores stuck at 125-row windows and took 178 s."""
        return cls(
            window=max(1, max_window // 2),
            min_window=smallest_window(max_window),
            max_window=max_window,
            target_seconds=target_seconds,
            duty=duty,
        )

    def after(self, latency_seconds: float) -> float:
        """Adapt the window to a request that took `latency_seconds`; return the pause before the next one."""
        self.adapt(latency_seconds)
        return self.pause_after(latency_seconds)

    def adapt(self, latency_seconds: float) -> None:
        """Halve the window after a slow request, grow it by a quarter after a fast one."""
        if latency_seconds > self.target_seconds:
            self.window = max(self.min_window, self.window // 2)
        elif latency_seconds < self.target_seconds / 2:
            self.window = min(self.max_window, self.window + max(1, self.window // 4))

    def pause_after(self, latency_seconds: float) -> float:
        """The duty cycle's pause after a request of `latency_seconds`, without touching the window."""
        return max(0.0, latency_seconds) * (1 - self.duty) / self.duty


def duty_cycle_problem(duty_cycle: float) -> str | None:
    """Why `duty_cycle` cannot pace (it must be above 0 and at most 1, 1 never pausing), or None."""
    if math.isfinite(duty_cycle) and 0 < duty_cycle <= 1:
        return None
    return f"{duty_cycle:g} is not a duty cycle: it must be above 0 and at most 1 (1: no pauses)"


def smallest_window(max_window: int) -> int:
    """The fewest rows a paced request carries: a quarter of `max_window` (Pacer.starting_small says
    why not fewer)."""
    return max(1, max_window // 4)


@dataclass(frozen=True)
class FixedPacing:
    """What a user does not set (the values above, and why); tests and benches set their own. The duty
    cycle is chosen where the process starts (DUTY_CYCLE without a choice)."""

    batch: int = BATCH
    request_target_ms: float = REQUEST_TARGET_MS
    quiet_ms: float = QUIET_MS
    quiet_wait_max_ms: float = QUIET_WAIT_MAX_MS
    index_range_reuse_seconds: float = 0.0
    job_idle_ms: float = JOB_IDLE_MS

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be at least 1, got {self.batch}")
        if self.quiet_ms < 0:
            raise ValueError(f"quiet_ms must be at least 0, got {self.quiet_ms}")
        if self.quiet_wait_max_ms <= 0:
            raise ValueError(f"quiet_wait_max_ms must be above 0, got {self.quiet_wait_max_ms}")
        if self.job_idle_ms <= 0:
            raise ValueError(f"job_idle_ms must be above 0, got {self.job_idle_ms}")

    def quiet_seconds(self) -> tuple[float, float]:
        """(how long the controller must be idle, the longest wait for that), in seconds."""
        return self.quiet_ms / 1000, self.quiet_wait_max_ms / 1000


FIXED_PACING = FixedPacing()
