"""A sweep in a process tq-gc owns (the sidecar's actor, the CLI) runs with the cyclic garbage
collector off (it allocates millions of objects and makes no cycles); embedded in someone else's process
(a trainer calling Collector.sweep) it leaves the process's collector alone. What an owned sweep leaves
alive, the first-seen records it keeps above all, must not then wait in the young generation for the
next collection to walk them all: that collection holds the interpreter lock of the sidecar's process
(the registry's callers with `memory://` state) for as long as it walks. Beside a job at 1M rows one
such collection held the sidecar for 554 ms (bench/gc_log.py)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tq_gc.config import parse_config
from tq_gc.report import SweepReport
from tq_gc.state import RedisState
from tq_gc.sweep import Collector

from support.scripted_store import ScriptedRowStore
from support.world import STAGING, World

ROWS = 20_000
# The young generation a collection may walk: a few thousand objects of the process's own (the
# collector's default threshold is 700), far fewer than the sweep's one or two a row.
YOUNG_AT_MOST = 3_000


@contextmanager
def young_generation_walks() -> Iterator[list[int]]:
    """The young generation's size at the start of every collection while the block runs, and of the
    one an allocation right after it sets off."""
    walked: list[int] = []

    def on_collection(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            walked.append(gc.get_count()[0])

    assert gc.isenabled(), "the test runs with the cyclic GC on, as a sidecar's process does"
    gc.collect()
    gc.callbacks.append(on_collection)
    try:
        yield walked
        allocations = [[i] for i in range(2_000)]  # the process goes on: a collection is due
        del allocations
    finally:
        gc.callbacks.remove(on_collection)


def assert_no_long_walk(walked: list[int]) -> None:
    assert walked, "an allocation after the sweep sets off a collection"
    assert max(walked) <= YOUNG_AT_MOST, f"a collection walked {max(walked)} young objects"


def put_staging(put: Callable[[str, str], object]) -> None:
    for i in range(ROWS):
        put(STAGING, f"r{i // 8}/call-{i}")


def owned_sweep(world: World) -> SweepReport:
    """A sweep as the sidecar and the CLI run it: in a process of tq-gc's own."""
    collector = Collector(world.config, world.state, world.rows, holder="test", pause_cyclic_gc=True)
    return collector.sweep(dry_run=False)


@pytest.mark.parametrize("sweeps", [1, 2])
def test_a_sweep_leaves_no_young_generation_for_the_next_collection(tmp_path: Path, sweeps: int) -> None:
    world = World(tmp_path)
    put_staging(world.rows.put)
    for _ in range(sweeps - 1):
        owned_sweep(world)
        world.age()
    with young_generation_walks() as walked:
        report = owned_sweep(world)
    assert report.counts.in_scope == ROWS
    assert_no_long_walk(walked)


def test_a_sweep_with_redis_state_leaves_no_young_generation(redis_url: str) -> None:
    rows = ScriptedRowStore()
    put_staging(rows.put)
    config = parse_config(
        {
            "namespace": "job-gc",
            "state_url": redis_url,
            "scope": [{"partition": STAGING, "all_keys": True}],
            "limits": {"max_delete_fraction": 1.0},
        }
    )
    state = RedisState.from_url(redis_url, "job-gc")
    collector = Collector(config, state, rows, holder="test", pause_cyclic_gc=True)
    with young_generation_walks() as walked:
        report = collector.sweep(dry_run=False)
    assert report.counts.in_scope == ROWS
    assert_no_long_walk(walked)


def test_a_sweep_leaves_what_its_process_froze_frozen(tmp_path: Path) -> None:
    world = World(tmp_path)
    put_staging(world.rows.put)
    gc.collect()
    gc.freeze()  # a process may freeze its imports (fork-friendly servers do)
    try:
        frozen = gc.get_freeze_count()
        owned_sweep(world)
        # Frozen objects that die meanwhile (another test's threads ending) leave the count; thawing all
        # of them (unfreeze) would leave about none.
        assert gc.get_freeze_count() > frozen // 2, "the sweep thawed what the process had frozen"
    finally:
        gc.unfreeze()


def test_an_embedded_sweep_leaves_the_processs_collector_on(tmp_path: Path) -> None:
    """Collector.sweep called from a trainer's process: switching the collector off for minutes would
    let the trainer's own cyclic garbage pile up meanwhile."""
    world = World(tmp_path)
    put_staging(world.rows.put)
    enabled_while_listing: list[bool] = []
    world.rows.before("list_keys", lambda: enabled_while_listing.append(gc.isenabled()))
    world.sweep()
    assert enabled_while_listing == [True]
    assert gc.isenabled()
