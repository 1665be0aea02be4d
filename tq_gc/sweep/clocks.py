"""The clocks a sweep reads, each for one purpose. Grace runs on the state store's clock
(StateStore.now_ms), never the host's; the lease's freshness on the monotonic clock (lease.py); the
report's times on the wall clock, in UTC; its phases on the performance counter."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from tq_gc.report import SweepReport

log = logging.getLogger(__name__)


def utc_now_iso() -> str:
    """The wall clock now, in UTC, ISO 8601 to the millisecond: a report's or an error's time."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@contextmanager
def timed_phase(report: SweepReport, name: str) -> Iterator[None]:
    """Add the block's time to the report's phase `name` (a phase may run in several stretches)."""
    started = time.perf_counter()
    log.debug("sweep %s: phase %s started", report.run_id, name)
    try:
        yield
    finally:
        spent_ms = (time.perf_counter() - started) * 1000
        report.phases_ms[name] = report.phases_ms.get(name, 0.0) + spent_ms
        log.debug("sweep %s: phase %s ended after %.1f ms", report.run_id, name, spent_ms)
