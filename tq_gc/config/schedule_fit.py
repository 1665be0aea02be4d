"""Whether a schedule can reclaim anything: grace accrues only over observed time, and a gap in sweeping
longer than the grace restarts every row's clock (docs/safety.md), so sweeps must come at least twice
per grace. A schedule written that does not is refused at load (config), by `check` and by `serve`; a
config that writes none sweeps twice per grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from apscheduler.triggers.cron import CronTrigger

if TYPE_CHECKING:
    from tq_gc.config.models import Config, Schedule

# A cron schedule's longest gap is read from its fire times over this span (a weekly pattern shows its
# weekend), at most these many fires (every minute: 33 hours; ~25 ms, the cost of each load of such a
# config) or this far ahead (a yearly one shows one gap).
CRON_SPAN_SCANNED = timedelta(days=8)
CRON_FIRES_SCANNED = 2_000
CRON_HORIZON = timedelta(days=800)
# Schedule's own default interval: kept where it sweeps twice per grace.
DEFAULT_INTERVAL_SECONDS = 60.0
# A fixed start: the same schedule reads the same at every load.
_CRON_SCAN_START = datetime(2026, 1, 1, tzinfo=UTC)


def longest_gap_seconds(schedule: Schedule, stop_above_seconds: float = float("inf")) -> float:
    """The longest time between two sweeps the schedule starts. Stops early once a gap
    above `stop_above_seconds` is found (the answer is then "too long", whatever the rest)."""
    if schedule.cron is None:
        assert schedule.interval_seconds is not None, "a schedule has an interval or a cron"
        return schedule.interval_seconds
    return _longest_cron_gap_seconds(schedule.cron, stop_above_seconds)


def _longest_cron_gap_seconds(cron: str, stop_above_seconds: float) -> float:
    trigger = CronTrigger.from_crontab(cron, timezone=UTC)
    first = previous = trigger.get_next_fire_time(None, _CRON_SCAN_START)
    longest = 0.0
    for _ in range(CRON_FIRES_SCANNED):
        if previous is None:
            break
        fire = trigger.get_next_fire_time(previous, previous + timedelta(seconds=1))
        if fire is None or fire - _CRON_SCAN_START > CRON_HORIZON:
            break
        longest = max(longest, (fire - previous).total_seconds())
        assert first is not None
        if longest > stop_above_seconds or fire - first >= CRON_SPAN_SCANNED:
            break
        previous = fire
    return longest


def default_schedule(grace_seconds: float) -> Schedule:
    """The schedule of a config that writes none: every DEFAULT_INTERVAL_SECONDS, or twice per grace if
    that is more often (grace_seconds 60: every 30 s)."""
    from tq_gc.config.models import Schedule

    if grace_seconds == 0 or grace_seconds / 2 >= DEFAULT_INTERVAL_SECONDS:
        return Schedule()
    return Schedule(interval_seconds=grace_seconds / 2)


def schedule_gap_problem(schedule: Schedule, grace_seconds: float) -> str | None:
    """Why sweeps on `schedule` can never reclaim a row with this grace, or None if they can."""
    if grace_seconds == 0:  # every unreferenced row is eligible at its first sighting
        return None
    limit_seconds = grace_seconds / 2
    gap_seconds = longest_gap_seconds(schedule, stop_above_seconds=limit_seconds)
    if gap_seconds <= limit_seconds:
        return None
    how = f"cron {schedule.cron!r}" if schedule.cron else f"interval_seconds={schedule.interval_seconds:g}"
    return (
        f"schedule: sweeps up to {gap_seconds:g} s apart ({how}) cannot reclaim with "
        f"grace_seconds={grace_seconds:g}: grace accrues only while sweeps observe a row, and a pause "
        "longer than the grace restarts its clock, so sweep at least twice per grace. Sweep every "
        f"{limit_seconds:g} s or less, or raise grace_seconds to {2 * gap_seconds:g} or more"
    )


def schedule_problem(config: Config) -> str | None:
    """Why the config's schedule can never reclaim a row, or None if it can (allow_short_grace lets a
    test's config through load; `check` and `serve` still refuse it)."""
    return schedule_gap_problem(config.schedule, config.grace_seconds)
