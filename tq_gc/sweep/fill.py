"""The sweep's last look: how full the row store's storage is after it, and the pressure warning."""

from __future__ import annotations

import logging
from dataclasses import replace

from tq_gc.config import Config
from tq_gc.footprint import Leftovers, StorageFill
from tq_gc.report import SweepReport, WarningKind, warn
from tq_gc.stores.base import RowStore

log = logging.getLogger(__name__)


def read_storage_fill(row_store: RowStore, config: Config, report: SweepReport) -> None:
    """Put the storage's fill into the report, and a warning if its headroom is below the configured
    pressure threshold. Under pressure (and only then: the audit is O(rows)) the report carries the
    storage's leftovers too, cells no row owns, which count against the capacity. A fill or an audit
    that cannot be read is only logged: the sweep's outcome stands."""
    try:
        fill = row_store.storage_fill()
    except Exception as exc:
        log.warning("could not read the storage units' fill: %s: %s", type(exc).__name__, exc)
        return
    if fill is None:
        return
    warning = pressure_warning(fill, config.pressure.headroom_below)
    if warning is not None:
        fill = replace(fill, leftovers=_leftovers(row_store))
        warn(report, WarningKind.STORAGE_PRESSURE, warning)
    report.storage = fill


def _leftovers(row_store: RowStore) -> Leftovers | None:
    try:
        return row_store.storage_leftovers()
    except Exception as exc:
        log.warning("could not audit the storage units for leftovers: %s: %s", type(exc).__name__, exc)
        return None


def pressure_warning(fill: StorageFill, threshold: float | None) -> str | None:
    """The line an operator reads when the storage's headroom is below `threshold`, else None."""
    if threshold is None or not fill.under_pressure(threshold):
        return None
    fullest = min(fill.bounded, key=lambda unit: unit.headroom or 0.0)
    return (
        f"storage pressure: {fill.headroom:.1%} headroom is below the threshold {threshold:.1%} "
        f"(fullest storage unit {fullest.unit}: {fullest.active_keys} of {fullest.capacity} rows); "
        "TransferQueue fails every put into a full unit: sweeping at the pressure interval"
    )
