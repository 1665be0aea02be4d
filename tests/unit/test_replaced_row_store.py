"""A row store replaced under a long-lived collector (the job's TQ controller died, and the job made a new
one): the new store issues global indexes afresh, so a first-seen record made against the old one can
carry the very identity (key, global index, tags) of a new row. Such records must not make a new row
deletable on first sight: the collector forgets them when the store's identity space changes, and each
row's grace starts at its first sighting in the new store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tq_gc.report import Outcome, SweepReport
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.sweep import Collector

from support.world import DATA, GRACE_S, STAGING, World

KEYS = [f"orphan-{i}" for i in range(3)]


class Controller(MemoryRowStore):
    """One controller instance's rows, in the job's order of writes: the same order gives the same
    global indexes in a new one."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.put(DATA, "sample-0", {})
        for key in KEYS:
            self.put(STAGING, key, {"step": 1})

    def identity_space(self) -> str | None:
        return self.name


@pytest.mark.parametrize("sweeper", ["sidecar", "cronjob"])
def test_records_made_against_a_replaced_store_do_not_make_the_new_ones_rows_deletable(
    tmp_path: Path, sweeper: str
) -> None:
    """The sidecar's one collector sweeps across the replacement; a CronJob's run is a process (a
    collector) of its own, so what the last run attached to must be known from the state store."""
    world = World(tmp_path)
    controllers = [Controller("first")]
    collector = Collector(world.config, world.state, DeferredRowStore(lambda: controllers[-1]), holder="t")

    def sweep() -> SweepReport:
        if sweeper == "sidecar":
            return collector.sweep(dry_run=False)
        run = Collector(world.config, world.state, DeferredRowStore(lambda: controllers[-1]), holder="t")
        return run.sweep(dry_run=False)

    assert sweep().counts.within_grace == len(KEYS)
    world.age(GRACE_S * 2 / 3)
    assert sweep().counts.within_grace == len(KEYS)  # observed again: the records stay trusted
    old = controllers[0].identities(STAGING, KEYS)

    controllers.append(Controller("second"))  # the next attach finds the new one
    collector.row_store.close()  # the old one is gone: the store attaches afresh at the next sweep
    assert controllers[1].identities(STAGING, KEYS) == old, "the very identities the records hold"

    world.age(GRACE_S / 2)  # past the old records' grace, within a grace of the last observation
    report = sweep()
    assert report.outcome is Outcome.COMPLETED
    assert (report.counts.deleted, report.counts.within_grace) == (0, len(KEYS))
    assert controllers[1].keys(STAGING) == set(KEYS)

    world.age()
    later = sweep()
    assert later.counts.deleted == len(KEYS) and controllers[1].keys(STAGING) == set()


def test_the_same_store_attached_again_keeps_its_records(tmp_path: Path) -> None:
    """Re-attaching to the same controller (our client closed, the TQ alive) is no replacement."""
    world = World(tmp_path)
    same = Controller("first")
    collector = Collector(world.config, world.state, DeferredRowStore(lambda: same), holder="t")

    assert collector.sweep(dry_run=False).counts.within_grace == len(KEYS)
    collector.row_store.close()
    world.age()
    assert collector.sweep(dry_run=False).counts.deleted == len(KEYS)
