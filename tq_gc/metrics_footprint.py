"""The metrics of what rows cost and how much room is left, fed from sweep reports (metrics.py registers
them beside its own, on the same registry):

- `tqgc_orphan_bytes{state}`: bytes of unreferenced in-scope rows as of the last successful sweep,
  `eligible` (past their grace) and `within_grace`; `tqgc_referenced_bytes`; `tqgc_orphan_rows`
  (eligible + within grace: its `deriv()` is the rate at which orphans grow);
  `tqgc_reclaimed_bytes_total`.
- `tqgc_storage_unit_capacity_rows{unit}`, `tqgc_storage_unit_active_keys{unit}`: each TransferQueue
  storage unit's `GET_METRICS` at the sweep's end; `tqgc_storage_headroom_ratio`: the fullest bounded
  unit's free fraction (it fails the next put that lands on it); `tqgc_storage_free_rows`: its free rows.
- `tqgc_storage_pressure`: 1 while the headroom is below the configured `pressure.headroom_below`.

The alert "TransferQueue full in under 30 min" is `predict_linear` over the active keys of each unit
against its capacity (deploy/monitoring/alerts.yaml).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from tq_gc.report import Outcome, SweepReport

PREFIX = "tqgc_"
_SUCCESS = (Outcome.COMPLETED, Outcome.DRY_RUN)
# Gauges that hold the last good sweep's value on a Pushgateway (a failed run does not replace them).
KEPT_AFTER_FAILURE = tuple(
    PREFIX + name
    for name in (
        "orphan_bytes",
        "referenced_bytes",
        "orphan_rows",
        "storage_unit_capacity_rows",
        "storage_unit_active_keys",
        "storage_headroom_ratio",
        "storage_free_rows",
        "storage_pressure",
    )
)


@dataclass(frozen=True, slots=True)
class _Collectors:
    orphan_bytes: Gauge
    referenced_bytes: Gauge
    orphan_rows: Gauge
    reclaimed_bytes: Counter
    unit_capacity: Gauge
    unit_active_keys: Gauge
    headroom: Gauge
    free_rows: Gauge
    pressure: Gauge


def _register(registry: CollectorRegistry) -> _Collectors:
    collectors = _Collectors(
        orphan_bytes=Gauge(
            PREFIX + "orphan_bytes",
            "Bytes of unreferenced in-scope rows as of the last sweep, eligible or within their grace.",
            ["state"],
            registry=registry,
        ),
        referenced_bytes=Gauge(
            PREFIX + "referenced_bytes",
            "Bytes of referenced in-scope rows as of the last sweep.",
            registry=registry,
        ),
        orphan_rows=Gauge(
            PREFIX + "orphan_rows",
            "Unreferenced in-scope rows as of the last sweep (eligible + within grace).",
            registry=registry,
        ),
        reclaimed_bytes=Counter(PREFIX + "reclaimed_bytes", "Bytes of the rows deleted.", registry=registry),
        unit_capacity=Gauge(
            PREFIX + "storage_unit_capacity_rows",
            "Rows a TransferQueue storage unit holds at most (absent: unlimited).",
            ["unit"],
            registry=registry,
        ),
        unit_active_keys=Gauge(
            PREFIX + "storage_unit_active_keys",
            "Rows a TransferQueue storage unit holds, at the last sweep's end.",
            ["unit"],
            registry=registry,
        ),
        headroom=Gauge(
            PREFIX + "storage_headroom_ratio",
            "Free fraction of the fullest bounded TransferQueue storage unit (a put into a full one fails).",
            registry=registry,
        ),
        free_rows=Gauge(
            PREFIX + "storage_free_rows",
            "Rows the fullest bounded TransferQueue storage unit still takes.",
            registry=registry,
        ),
        pressure=Gauge(
            PREFIX + "storage_pressure",
            "1 while the storage headroom is below the configured pressure threshold, else 0.",
            registry=registry,
        ),
    )
    for state in ("eligible", "within_grace"):
        collectors.orphan_bytes.labels(state=state)
    return collectors


_registered: weakref.WeakKeyDictionary[CollectorRegistry, _Collectors] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class FootprintMetrics:
    """The footprint's series on `registry`, registered once per registry. `pressure_below` is the
    configured `pressure.headroom_below` (None: not set, never under pressure)."""

    def __init__(self, registry: CollectorRegistry, pressure_below: float | None = None) -> None:
        with _lock:
            collectors = _registered.get(registry)
            if collectors is None:
                collectors = _registered[registry] = _register(registry)
        self._c = collectors
        self._pressure_below = pressure_below

    def observe(self, report: SweepReport) -> None:
        c = self._c
        c.reclaimed_bytes.inc(report.bytes.reclaimed)
        if report.outcome not in _SUCCESS:
            return
        c.orphan_bytes.labels(state="eligible").set(report.bytes.eligible)
        c.orphan_bytes.labels(state="within_grace").set(report.bytes.within_grace)
        c.referenced_bytes.set(report.bytes.referenced)
        c.orphan_rows.set(report.counts.eligible + report.counts.within_grace)
        fill = report.storage
        if fill is None:
            return
        # From the headroom itself: the report's warnings hold other kinds too.
        self.observe_pressure(fill.under_pressure(self._pressure_below))
        for unit in fill.units:
            if unit.capacity is not None:
                c.unit_capacity.labels(unit=unit.unit).set(unit.capacity)
            c.unit_active_keys.labels(unit=unit.unit).set(unit.active_keys)
        if fill.headroom is not None:
            c.headroom.set(fill.headroom)
        if fill.free_rows is not None:
            c.free_rows.set(fill.free_rows)

    def observe_pressure(self, under_pressure: bool) -> None:
        """Set the pressure gauge (the sidecar's checks between sweeps set it too)."""
        self._c.pressure.set(1 if under_pressure else 0)
