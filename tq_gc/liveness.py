"""Liveness: how often sweeps get through, from the run summaries the state store keeps (newest first).

A collector that aborts or skips every sweep deletes nothing: safe, and useless. This reads, over the last
hour of runs, the share of sweeps that completed (or ran dry), were skipped and aborted, by cause; how many
of the newest sweeps in a row did not complete; and how long a checkpoint being written (a `tmp_`
directory, which the skip's reason names) has kept the newest sweeps skipping. Pure: the caller reads the
runs and the clock. Every sweeper of one state store writes there, so the figures are the job's, not one
process's, and survive a sidecar's restart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tq_gc.report import Cause, Outcome

WINDOW_SECONDS = 3600.0
# The cause label of a sweep that got through (completed, or a dry run that would have deleted).
NO_CAUSE = "none"
_THROUGH = (Outcome.COMPLETED.value, Outcome.DRY_RUN.value)
# Skips by design, not a stall: a fresh store (a new job, a Redis restarted empty) trusts no empty source
# for one grace (references/emptied.py). They neither count in the streak nor end it; their share shows.
_NOT_A_STALL = frozenset({Cause.BASELINE_REBUILDING.value})

Run = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Blocked:
    """The newest sweeps, in a row, skipped for a checkpoint being written."""

    sweeps: int
    seconds: float  # from the first of them to now
    reason: str  # the newest one's: it names the directories


@dataclass(frozen=True, slots=True)
class Liveness:
    window_seconds: float
    sweeps: int  # runs that finished in the window
    shares: dict[
        tuple[str, str], float
    ]  # (outcome, cause) -> share of `sweeps`; completed is ("completed", "none")
    since_completed: int  # the newest runs in a row that did not get through (of those the store keeps)
    blocked: Blocked | None

    def share(self, *outcomes: str) -> float:
        return sum(share for (outcome, _), share in self.shares.items() if outcome in outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_seconds": self.window_seconds,
            "sweeps": self.sweeps,
            "shares": [
                {"outcome": outcome, "cause": cause, "share": share}
                for (outcome, cause), share in sorted(self.shares.items(), key=lambda item: -item[1])
            ],
            "since_completed": self.since_completed,
            "checkpoint_blocking": None
            if self.blocked is None
            else {
                "sweeps": self.blocked.sweeps,
                "seconds": self.blocked.seconds,
                "reason": self.blocked.reason,
            },
        }


def liveness(runs: Sequence[Run], now: datetime, window_seconds: float = WINDOW_SECONDS) -> Liveness:
    """What `runs` (run summaries, newest first, as StateStore.recent_runs gives them) say at `now`."""
    recent = [run for run in runs if 0 <= _age_seconds(run, now) <= window_seconds]
    counted = Counter(_outcome_and_cause(run) for run in recent)
    shares = {key: count / len(recent) for key, count in counted.items()}
    return Liveness(window_seconds, len(recent), shares, _since_completed(runs), _blocked(runs, now))


def _outcome_and_cause(run: Run) -> tuple[str, str]:
    outcome = str(run.get("outcome", ""))
    return outcome, NO_CAUSE if outcome in _THROUGH else str(run.get("cause") or NO_CAUSE)


def _since_completed(runs: Sequence[Run]) -> int:
    count = 0
    for run in runs:
        if run.get("outcome") in _THROUGH:
            break
        count += run.get("cause") not in _NOT_A_STALL
    return count


def _blocked(runs: Sequence[Run], now: datetime) -> Blocked | None:
    streak = []
    for run in runs:
        if run.get("cause") != Cause.CHECKPOINT_IN_PROGRESS.value:
            break
        streak.append(run)
    if not streak:
        return None
    return Blocked(len(streak), max(_age_seconds(streak[-1], now), 0.0), str(streak[0].get("reason") or ""))


def _age_seconds(run: Run, now: datetime) -> float:
    """Seconds from the run's start to `now`; negative (outside every window) if it has no readable time."""
    try:
        return (now - datetime.fromisoformat(str(run.get("started_at")))).total_seconds()
    except (TypeError, ValueError):
        return -1.0


__all__ = ["NO_CAUSE", "WINDOW_SECONDS", "Blocked", "Liveness", "liveness"]
