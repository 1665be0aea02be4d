"""Pressure mode: below the headroom threshold the sidecar sweeps at once, then every pressure interval
until the pressure is gone; the sweeps are ordinary sweeps (graces unchanged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tq_gc.config.models import PressureConfig
from tq_gc.errors import StoreUnavailable
from tq_gc.footprint import Leftovers, StorageFill, UnitFill
from tq_gc.report import WarningKind
from tq_gc.sidecar.pressure import PressureWatch

from support.scripted_store import ScriptedRowStore
from support.world import GRACE_S, STAGING, World


class Job:
    """A storage unit of 100 rows, a clock, and the sweeps the watch asked for."""

    def __init__(self) -> None:
        self.active_keys = 0
        self.now = 0.0
        self.sweeps: list[float] = []
        self.changes: list[bool] = []

    def fill(self) -> StorageFill:
        return StorageFill((UnitFill("u0", 100, self.active_keys), UnitFill("u1", 100, 0)))

    def sweep(self) -> None:
        self.sweeps.append(self.now)

    def last_sweep_at(self) -> float | None:
        return self.sweeps[-1] if self.sweeps else None

    def watch(self, interval_seconds: float = 30.0) -> PressureWatch:
        return PressureWatch(
            PressureConfig(headroom_below=0.2),
            self.fill,
            self.sweep,
            self.last_sweep_at,
            self.changes.append,
            lambda: self.now,
            interval_seconds=interval_seconds,
        )


def test_pressure_sweeps_at_once_then_every_interval_until_it_is_gone() -> None:
    job = Job()
    watch = job.watch()
    job.active_keys = 70
    assert not watch.check() and job.sweeps == []

    job.active_keys, job.now = 85, 10.0  # 15% headroom on the fullest unit: below 20%
    assert watch.check() and job.sweeps == [10.0]
    job.now = 25.0
    assert not watch.check()  # under pressure, but the last sweep is not an interval old
    job.now = 40.0
    assert watch.check() and job.sweeps == [10.0, 40.0]
    job.active_keys, job.now = 50, 80.0  # the sweeps reclaimed: pressure gone
    assert not watch.check() and job.sweeps == [10.0, 40.0]
    assert job.changes == [True, False]
    assert not watch.under_pressure


def test_a_fill_that_cannot_be_read_or_is_unbounded_changes_nothing() -> None:
    job = Job()

    def unreadable() -> StorageFill:
        raise StoreUnavailable("the TQ is not there yet")

    watch = PressureWatch(PressureConfig(headroom_below=0.5), unreadable, job.sweep, job.last_sweep_at)
    assert not watch.check()
    unbounded = PressureWatch(
        PressureConfig(headroom_below=0.5),
        lambda: StorageFill((UnitFill("u0", None, 10**9),)),
        job.sweep,
        job.last_sweep_at,
    )
    assert not unbounded.check() and job.sweeps == []


def test_a_pressure_sweep_keeps_the_grace(tmp_path: Path) -> None:
    """Sweeps under pressure delete only what is past its grace: a row seen a moment ago stays."""

    class Full(ScriptedRowStore):
        def storage_fill(self) -> StorageFill:
            return StorageFill((UnitFill("u0", 10, 10),))

    world = World(tmp_path, pressure={"headroom_below": 0.5})
    world.rows = Full()
    world.rows.put("rollout_data", "sample-0", {})
    world.rows.put(STAGING, "old/1")
    world.sweep()
    world.age(GRACE_S)
    world.rows.put(STAGING, "new/1")
    reports = []
    watch = PressureWatch(
        world.config.pressure,
        world.rows.storage_fill,
        lambda: reports.append(world.sweep()),
        lambda: None,
    )

    assert watch.check() and watch.check()

    assert world.staging() == {"new/1"}
    assert [r.counts.deleted for r in reports] == [1, 0]
    assert all(r.warnings[0].kind is WarningKind.STORAGE_PRESSURE for r in reports)


def test_pressure_config_refuses_a_threshold_outside_0_1() -> None:
    with pytest.raises(ValueError, match="headroom_below"):
        PressureConfig(headroom_below=1.5)


class Audited(ScriptedRowStore):
    """A storage unit of 10 rows holding `active_keys`, with one leftover cell; counts the audits."""

    def __init__(self, active_keys: int) -> None:
        super().__init__()
        self.active_keys = active_keys
        self.audits = 0

    def storage_fill(self) -> StorageFill:
        return StorageFill((UnitFill("u0", 10, self.active_keys),))

    def storage_leftovers(self) -> Leftovers:
        self.audits += 1
        return Leftovers(1, 64, {"u0": 1}, (7,), 0, "no clear by index")


@pytest.mark.parametrize(
    ("headroom_below", "active_keys", "audited"),
    [
        (0.5, 9, True),  # 10% headroom, below 50%: under pressure
        (0.5, 2, False),  # 80% headroom: no pressure
        (None, 9, False),  # no threshold set: never under pressure
    ],
)
def test_a_sweep_audits_the_leftovers_only_while_the_storage_is_under_pressure(
    tmp_path: Path, headroom_below: float | None, active_keys: int, audited: bool
) -> None:
    world = World(tmp_path, pressure={"headroom_below": headroom_below})
    world.rows = store = Audited(active_keys)
    world.rows.put("rollout_data", "sample-0", {})

    report = world.sweep()

    assert report.storage is not None
    assert (report.storage.leftovers is not None) is audited
    assert store.audits == int(audited)
    if audited:
        assert report.to_dict()["storage"]["leftovers"]["cells"] == 1
