"""Pressure inside a real sidecar actor, on a real Ray cluster and TQ: with the storage's headroom below
`pressure.headroom_below` the sidecar sweeps at once (its schedule is an hour away), keeps sweeping at
the pressure interval, deletes no row within its grace, reclaims the orphans once their grace has passed,
and the pressure gauge follows the headroom."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from harness import keys_in

from tq_gc.sidecar.pressure import PressureTiming
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.leftovers import storage_units

from .helpers import MakeConfig, StartSidecar, call, reports, scrape, wait_until

pytestmark = pytest.mark.ray

PRESSURE_GRACE_S = 8.0  # long enough for several pressure sweeps inside it
FREE_ROWS = 10  # what each unit still takes once bounded
ORPHANS = 40  # about half on each unit: their reclaim frees far more than the threshold's margin


@contextlib.contextmanager
def bounded_units(capacity_rows: int) -> Iterator[None]:
    """The session TQ's storage units hold at most `capacity_rows` rows each (what `total_storage_size`
    sets: the unit's reported capacity and its put check), until the test ends."""

    def bound(actor: Any, rows: int | None) -> None:
        actor.storage_unit_size = rows
        actor.storage_data.storage_size = rows

    units = list(storage_units().values())
    assert units, "the session TQ has no storage units"
    ray.get([unit.__ray_call__.remote(bound, capacity_rows) for unit in units], timeout=60)
    try:
        yield
    finally:
        ray.get([unit.__ray_call__.remote(bound, None) for unit in units], timeout=60)


def test_low_headroom_makes_the_sidecar_sweep_at_once_and_it_keeps_every_grace(
    make_config: MakeConfig,
    sidecar: StartSidecar,
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
) -> None:
    orphans = {f"orphan/{i}" for i in range(ORPHANS)}
    put_rows(tq_partition, sorted(orphans))
    with TransferQueueRowStore.attach(make_config().transfer_queue) as store:
        fullest_rows = max(unit.active_keys for unit in store.storage_fill().units)
        capacity_rows = fullest_rows + FREE_ROWS
        # Under pressure now; out of it once a few of the orphans' rows on each unit are reclaimed.
        threshold = (FREE_ROWS + 5) / capacity_rows
        with bounded_units(capacity_rows):
            fill = store.storage_fill()
            assert fill.headroom is not None and fill.headroom < threshold
            config = make_config(
                grace_seconds=PRESSURE_GRACE_S,
                schedule={"interval_seconds": 3600},  # no scheduled sweep during the test
                pressure={"headroom_below": threshold},
            )
            timing = PressureTiming(interval_seconds=0.5, check_seconds=0.5)
            handle = sidecar(config, pressure_timing=timing, metrics_port=0)
            port = call(handle, "status")["metrics_port"]

            wait_until("the sidecar sweeps under pressure", lambda: reports(handle))
            first = reports(handle)[0]
            assert first["counts"]["within_grace"] == ORPHANS and first["counts"]["deleted"] == 0
            assert any(warning["kind"] == "storage_pressure" for warning in first["warnings"])
            wait_until("the pressure gauge is up", lambda: scrape(port)[("tqgc_storage_pressure", ())] == 1)
            wait_until("the pressure sweeps go on", lambda: len(reports(handle)) >= 3)

            wait_until(
                "the orphans are reclaimed past their grace",
                lambda: not keys_in(tq, tq_partition) & orphans,
                timeout_seconds=60,
            )
            wait_until(
                "the deleting sweep has reported",
                lambda: any(r["counts"]["deleted"] for r in reports(handle)),
            )
            history = reports(handle)
            deleted = [row for r in history for row in r["deleted_sample"]]
            assert deleted and all(row["unreferenced_s"] >= PRESSURE_GRACE_S for row in deleted)
            assert sum(r["counts"]["deleted"] for r in history) == ORPHANS
            wait_until("the pressure is gone", lambda: scrape(port)[("tqgc_storage_pressure", ())] == 0)
            assert call(handle, "status")["next_run_at"] is not None  # the schedule is still on
