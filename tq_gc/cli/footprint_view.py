"""`tq-gc status` and the sweep table's lines on what rows cost and how much room is left, read from
recorded sweep reports (their `bytes`, `storage` and `counts`): pure, no store reached."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tq_gc.footprint import minutes_to_full, orphan_growth_per_hour

_SUCCESS = ("completed", "dry_run")


def footprint_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """From recent runs (newest first): the last successful sweep's bytes and storage fill, the rate at
    which orphan rows and stored rows grew over those sweeps, and at that rate the minutes until the
    fullest storage unit is full (None where unknown)."""
    good = [run for run in runs if run.get("outcome") in _SUCCESS and _seconds(run) is not None]
    last = good[0] if good else None
    orphans = [(_seconds(r) or 0.0, _orphan_rows(r)) for r in good]
    filled = [(_seconds(r) or 0.0, int(r["storage"]["active_keys"])) for r in good if r.get("storage")]
    storage = last.get("storage") if last else None
    fill_rate = orphan_growth_per_hour(filled)
    bounded = [u for u in (storage or {}).get("units", []) if u.get("capacity") is not None]
    # Rows land on unit global_index % units: the fullest unit gets its share of the store's growth.
    unit_rate = None if fill_rate is None or not bounded else fill_rate / len(bounded)
    return {
        "bytes": (last or {}).get("bytes"),
        "storage": storage,
        "orphan_rows": None if last is None else _orphan_rows(last),
        "orphan_rows_per_hour": orphan_growth_per_hour(orphans),
        "stored_rows_per_hour": fill_rate,
        "minutes_to_full": minutes_to_full((storage or {}).get("free_rows"), unit_rate),
        "warnings": (last or {}).get("warnings") or [],
    }


def footprint_lines(summary: Mapping[str, Any]) -> list[str]:
    """The summary as a few lines for a person."""
    lines = []
    held = summary.get("bytes")
    if held:
        lines.append(
            f"orphans: {summary.get('orphan_rows', 0)} rows, {human_bytes(held['orphaned'])} "
            f"({human_bytes(held['eligible'])} eligible, {human_bytes(held['within_grace'])} within grace); "
            f"referenced {human_bytes(held['referenced'])}; reclaimed {human_bytes(held['reclaimed'])}"
            + (f"; {held['unsized_rows']} rows of unknown size" if held.get("unsized_rows") else "")
        )
    rate = summary.get("orphan_rows_per_hour")
    if rate is not None:
        lines.append(f"orphans grow {rate:+.0f} rows/h over the sweeps shown")
    storage = summary.get("storage")
    if storage:
        lines.append(storage_line(storage))
        minutes = summary.get("minutes_to_full")
        if minutes is not None:
            rate = summary["stored_rows_per_hour"]
            lines.append(f"at {rate:+.0f} rows/h the fullest storage unit is full in {minutes:.0f} min")
    lines.extend(f"WARNING: {warning['message']}" for warning in summary.get("warnings") or [])
    return lines


def storage_line(storage: Mapping[str, Any]) -> str:
    units = storage.get("units") or []
    headroom = storage.get("headroom")
    if headroom is None:
        room = "unbounded" if units else "not read"
    else:
        room = f"headroom {headroom:.1%} ({storage.get('free_rows')} rows free in the fullest unit)"
    held = ", ".join(
        f"{u['unit']} {u['active_keys']}/{u['capacity'] if u['capacity'] is not None else '∞'}" for u in units
    )
    unread = f"; unread: {storage['unread']}" if storage.get("unread") else ""
    leftovers = storage.get("leftovers")
    if leftovers and leftovers.get("cells"):
        unread += (
            f"; leftovers: {leftovers['cells']} cells no row owns, {human_bytes(leftovers['bytes'])} "
            f"({leftovers.get('why_not_reclaimed') or 'reclaimed'})"
        )
    return f"storage: {room}; {held or 'no units'}{unread}"


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _orphan_rows(run: Mapping[str, Any]) -> int:
    counts = run.get("counts") or {}
    return int(counts.get("eligible", 0)) + int(counts.get("within_grace", 0))


def _seconds(run: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(run.get("finished_at"))).timestamp()
    except ValueError:
        return None
