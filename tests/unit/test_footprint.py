"""What rows cost and how much room is left: the report's bytes beside its counts, the storage fill and
its headroom (the fullest unit binds), the pressure warning, and the growth estimates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tq_gc.decisions import Decision
from tq_gc.footprint import (
    Bytes,
    StorageFill,
    UnitFill,
    bytes_of,
    minutes_to_full,
    orphan_growth_per_hour,
)
from tq_gc.report import SweepReport, WarningKind
from tq_gc.rows import ListedKeys
from tq_gc.sweep.fill import pressure_warning

from support.scripted_store import ScriptedRowStore
from support.world import STAGING, World


def test_bytes_of_a_plan_sum_each_bucket_and_count_the_rows_without_a_size() -> None:
    buckets = {
        Decision.DELETE: {"s": ["a", "b"]},
        Decision.KEEP_OVER_CAP: {"s": ["c"]},
        Decision.KEEP_GRACE: {"s": ["d"], "t": ["x"]},
        Decision.KEEP_ADMISSION: {"s": ["e"]},
        Decision.KEEP_TAG: {"t": ["y"]},
    }
    sizes = {"s": {"a": 10, "b": 20, "c": 5, "d": 7, "e": 100}, "t": {"y": 1000}}

    found = bytes_of(buckets, sizes)

    assert found == Bytes(
        orphaned=42, eligible=35, within_grace=7, referenced=1100, sized_rows=6, unsized_rows=1
    )


def test_a_sweep_reports_orphan_referenced_and_reclaimed_bytes(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.rows.put(STAGING, "old/1", nbytes=1000)
    world.rows.put(STAGING, "old/2", nbytes=24)
    world.rows.put(STAGING, "held/1", nbytes=300)
    world.registry.admit("adm", {STAGING: ["held/1"]}, ttl_seconds=10_000)
    first = world.sweep()
    world.age()
    world.rows.put(STAGING, "new/1", nbytes=5)
    world.rows.put(STAGING, "new/unsized")

    second = world.sweep()

    assert first.bytes.within_grace == 1024 and first.bytes.referenced == 300
    assert first.bytes.reclaimed == 0
    assert second.bytes.eligible == 1024 and second.bytes.within_grace == 5
    assert second.bytes.orphaned == 1029 and second.bytes.referenced == 300
    assert second.bytes.reclaimed == 1024 and second.counts.deleted == 2
    assert second.bytes.unsized_rows == 1
    document = second.to_dict()
    assert document["bytes"]["reclaimed"] == 1024 and "counts" in document
    assert SweepReport.from_dict(document).to_dict() == document


def test_the_fullest_storage_unit_binds_the_headroom() -> None:
    fill = StorageFill((UnitFill("u0", 100, 20), UnitFill("u1", 100, 90), UnitFill("u2", None, 5)))

    assert fill.headroom == pytest.approx(0.10)
    assert fill.free_rows == 10
    assert fill.capacity == 200 and fill.active_keys == 115
    assert fill.under_pressure(0.2) and not fill.under_pressure(0.05) and not fill.under_pressure(None)
    assert StorageFill.from_dict(fill.to_dict()) == fill


def test_an_unbounded_store_has_no_headroom_and_no_pressure() -> None:
    fill = StorageFill((UnitFill("u0", None, 10**6),))

    assert fill.headroom is None and fill.free_rows is None
    assert not fill.under_pressure(0.5)
    assert pressure_warning(fill, 0.5) is None


def test_the_pressure_warning_names_the_fullest_unit_and_the_threshold() -> None:
    fill = StorageFill((UnitFill("TQ_STORAGE_UNIT_a", 50, 10), UnitFill("TQ_STORAGE_UNIT_b", 50, 48)))

    warning = pressure_warning(fill, 0.25)

    assert warning is not None
    assert "4.0% headroom" in warning and "25.0%" in warning and "TQ_STORAGE_UNIT_b: 48 of 50" in warning
    assert pressure_warning(fill, 0.01) is None


def test_a_sweep_under_pressure_warns_in_its_report(tmp_path: Path) -> None:
    class Filling(ScriptedRowStore):
        def storage_fill(self) -> StorageFill:
            return StorageFill((UnitFill("u0", 10, 9),))

    world = World(tmp_path, pressure={"headroom_below": 0.2})
    world.rows = Filling()
    world.rows.put("rollout_data", "sample-0", {})

    report = world.sweep()

    assert report.storage is not None and report.storage.headroom == pytest.approx(0.1)
    [warning] = [w for w in report.warnings if w.kind is WarningKind.STORAGE_PRESSURE]
    assert "storage pressure" in warning.message
    assert {"kind": "storage_pressure", "message": warning.message} in report.to_dict()["warnings"]


def test_orphan_growth_and_minutes_to_full() -> None:
    assert orphan_growth_per_hour([(0.0, 10)]) is None
    assert orphan_growth_per_hour([(3600.0, 110), (0.0, 10)]) == pytest.approx(100.0)
    assert orphan_growth_per_hour([(0.0, 100), (1800.0, 50)]) == pytest.approx(-100.0)
    assert minutes_to_full(50, 100.0) == pytest.approx(30.0)
    assert minutes_to_full(50, -1.0) is None and minutes_to_full(None, 10.0) is None


def test_leftovers_read_back_from_the_report_and_show_in_status() -> None:
    from tq_gc.cli.footprint_view import storage_line
    from tq_gc.footprint import Leftovers

    leftovers = Leftovers(
        3, 192, {"TransferQueueStorageUnit#0": 2, "TransferQueueStorageUnit#1": 1}, (4, 7, 9), 0, "why"
    )
    fill = StorageFill((UnitFill("u0", None, 5),), None, leftovers)

    again = StorageFill.from_dict(fill.to_dict())

    assert again == fill
    assert "leftovers: 3 cells no row owns, 192 B (why)" in storage_line(fill.to_dict())


_KEYS = st.sets(st.sampled_from([f"k{i}" for i in range(24)]), max_size=24)


@st.composite
def _plans_with_their_listing(draw: st.DrawFn) -> tuple[dict[Decision, dict[str, list[str]]], Any, Any]:
    """A plan's buckets over one partition's listed rows (some rows out of scope, or none), the sizes the
    store read (some rows unsized, and maybe rows the listing never had: a store read after it)."""
    listed = sorted(draw(_KEYS))
    in_scope = [key for key in listed if draw(st.booleans())] if draw(st.booleans()) else listed
    decisions = [decision for decision in Decision if decision is not Decision.KEEP_RECHECK]
    buckets: dict[Decision, dict[str, list[str]]] = {}
    for key in in_scope:
        buckets.setdefault(draw(st.sampled_from(decisions)), {}).setdefault("p", []).append(key)
    sized = [key for key in listed if draw(st.booleans())]
    sized += sorted(draw(_KEYS) - set(listed)) if draw(st.booleans()) else []
    sizes = {"p": {key: draw(st.integers(0, 10**9)) for key in sized}}
    as_swept = draw(st.booleans())  # a swept partition's listing is ListedKeys, a tags source's a dict
    return (
        buckets,
        sizes,
        {"p": ListedKeys(dict.fromkeys(listed, 0)) if as_swept else {key: {} for key in listed}},
    )


@given(_plans_with_their_listing())
def test_bytes_of_with_the_listing_equal_a_lookup_of_every_row(
    plan_sizes_listing: tuple[dict[Decision, dict[str, list[str]]], Any, Any],
) -> None:
    """Referenced bytes derived from the partition's total (where every listed row is in scope, and
    the sizes are the listing's) equal the sum of a lookup per row."""
    buckets, sizes, listing = plan_sizes_listing

    assert bytes_of(buckets, sizes, listing) == bytes_of(buckets, sizes)
