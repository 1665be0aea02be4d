"""Pressure mode: while the job's TransferQueue storage has less headroom than `pressure.headroom_below`,
the sidecar sweeps at once and then every 30 s (PressureTiming), until it has not.

It only makes sweeps come sooner: each is the same sweep as a scheduled one (same graces, same
references, same re-checks and limits), so it reclaims what is already eligible and nothing else. The
sidecar calls `check()` every 15 s (a read of the storage units' GET_METRICS: a few milliseconds of
each unit's worker thread); the sweep's own report carries the warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tq_gc.config.models import PressureConfig
from tq_gc.footprint import StorageFill
from tq_gc.sweep.fill import pressure_warning

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PressureTiming:
    """How often the sidecar sweeps under pressure, and reads the storage's fill to know: fixed values
    (PressureConfig's, with their reasons), not settings; a test sets its own in Python."""

    interval_seconds: float = PressureConfig.interval_seconds
    check_seconds: float = PressureConfig.check_seconds

    def __post_init__(self) -> None:
        if not (self.interval_seconds > 0 and self.check_seconds > 0):
            raise ValueError(f"both must be positive, got {self.interval_seconds}, {self.check_seconds}")


FIXED_PRESSURE_TIMING = PressureTiming()


class PressureWatch:
    """Decides, at each check, whether to sweep now. `read_fill` reads the storage now (None: nothing
    bounded, or not attached yet); `sweep` runs one sweep; `last_sweep_at` is when the last sweep of any
    kind started (time.monotonic(), None: never); `on_change(under)` is told when pressure starts or ends;
    under pressure it sweeps every `interval_seconds`."""

    def __init__(
        self,
        config: PressureConfig,
        read_fill: Callable[[], StorageFill | None],
        sweep: Callable[[], None],
        last_sweep_at: Callable[[], float | None],
        on_change: Callable[[bool], None] = lambda under: None,
        clock: Callable[[], float] = time.monotonic,
        interval_seconds: float = PressureConfig.interval_seconds,
    ) -> None:
        self._config = config
        self._interval_seconds = interval_seconds
        self._read_fill = read_fill
        self._sweep = sweep
        self._last_sweep_at = last_sweep_at
        self._on_change = on_change
        self._clock = clock
        self.under_pressure = False

    def check(self) -> bool:
        """Read the fill; sweep if pressure just began, or goes on and the last sweep is an interval old.
        Returns whether it swept. A fill that cannot be read changes nothing (logged)."""
        try:
            fill = self._read_fill()
        except Exception as exc:
            log.info("storage pressure not checked: %s: %s", type(exc).__name__, exc)
            return False
        warning = None if fill is None else pressure_warning(fill, self._config.headroom_below)
        if warning is None:
            if self.under_pressure:
                self.under_pressure = False
                self._on_change(False)
                log.info("storage pressure gone: back to the schedule")
            return False
        if not self.under_pressure:
            self.under_pressure = True
            self._on_change(True)
            log.warning("%s; sweeping now, then every %g s", warning, self._interval_seconds)
            self._sweep()
            return True
        last = self._last_sweep_at()
        if last is None or self._clock() - last >= self._interval_seconds:
            self._sweep()
            return True
        return False
