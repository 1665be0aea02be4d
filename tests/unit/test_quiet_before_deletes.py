"""The row store sizes each delete batch and waits for its quiet moment before it yields one
(RowStore.delete_batches; TransferQueueRowStore waits for the controller's): so the wait comes before
the batch's re-check, and may last a quarter of a second without widening the window between the
re-check of admissions and fences and the clear (docs/safety.md, rule 6)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tq_gc.report import Outcome, SweepReport
from tq_gc.rows import Identity, Tags
from tq_gc.stores import RowStore
from tq_gc.stores.base import DELETE_BATCH_ROWS, as_row_store
from tq_gc.stores.deferred import DeferredRowStore

from support.scripted_store import ScriptedRowStore, Timeline
from support.world import DATA, STAGING, World


class QuietRows(ScriptedRowStore):
    """A memory row store that waits for a quiet moment before it yields each delete batch, as the TQ
    store does; the wait is recorded on the sweep's timeline."""

    def __init__(self, timeline: Timeline, delete_batch_rows: int) -> None:
        super().__init__(timeline, delete_batch_rows)
        self._script(["wait_for_quiet"])

    def wait_for_quiet(self) -> None:
        return None

    def delete_batches(self, partition: str, keys: Sequence[str]) -> Iterator[list[str]]:
        for batch in super().delete_batches(partition, keys):
            self.wait_for_quiet()
            yield batch


def deleting_sweep(
    tmp_path: Path,
    rows: type[ScriptedRowStore],
    orphans: int,
    delete_batch_rows: int,
    wrap: Callable[[ScriptedRowStore], RowStore] = lambda rows: rows,
) -> tuple[World, int, SweepReport]:
    """A sweep that deletes `orphans` rows (seen a grace ago) from `rows` (as `wrap` presents it to the
    collector), a store of delete batches of `delete_batch_rows`: the world, the timeline's position where
    the sweep began, its report."""
    world = World(tmp_path, limits={"max_delete_fraction": 1.0})
    scripted = rows(world.state.timeline, delete_batch_rows)
    scripted.put(DATA, "sample-0", {})
    for i in range(orphans):
        scripted.put(STAGING, f"orphan-{i}")
    world.rows = wrap(scripted)  # type: ignore[assignment]
    world.sweep()
    world.age()
    start = world.state.timeline.position
    return world, start, world.sweep()


def waits_rechecks_and_deletes(world: World, start: int) -> list[str]:
    return [
        call.method
        for call in world.state.timeline.calls[start:]
        if call.method in ("wait_for_quiet", "recheck", "record_intent", "delete_if_unchanged")
    ]


def assert_each_delete_follows_a_wait_then_its_own_recheck(calls: list[str]) -> None:
    deletes = [i for i, method in enumerate(calls) if method == "delete_if_unchanged"]
    for at in deletes:
        before = calls[:at]
        last_wait = len(before) - 1 - before[::-1].index("wait_for_quiet")
        assert before[last_wait:] == ["wait_for_quiet", "recheck", "record_intent"], calls


def test_each_delete_batch_waits_for_a_quiet_moment_before_its_recheck(tmp_path: Path) -> None:
    world, start, report = deleting_sweep(tmp_path, QuietRows, orphans=5, delete_batch_rows=2)

    assert report.outcome is Outcome.COMPLETED and report.counts.deleted == 5
    calls = waits_rechecks_and_deletes(world, start)
    assert calls.count("delete_if_unchanged") == 3  # batches of 2, 2, 1
    assert_each_delete_follows_a_wait_then_its_own_recheck(calls)


@pytest.mark.parametrize("deferred", [False, True], ids=["unwrapped", "behind-the-deferred-store"])
def test_the_store_sizes_each_delete_batch_and_every_clear_follows_its_own_wait_and_recheck(
    tmp_path: Path, deferred: bool
) -> None:
    """The store alone sizes its delete batches, and the collector clears each as it came, after its own
    re-check: a batch split after the re-check would clear its later parts after waits of their own,
    further from it. The sidecar's DeferredRowStore passes the store's batches on as they are."""
    wrap: Callable[[ScriptedRowStore], RowStore] = (
        (lambda rows: DeferredRowStore(lambda: rows)) if deferred else (lambda rows: rows)
    )
    world, start, report = deleting_sweep(tmp_path, QuietRows, orphans=7, delete_batch_rows=2, wrap=wrap)

    assert report.outcome is Outcome.COMPLETED and report.counts.deleted == 7
    sizes = [c.n for c in world.state.timeline.calls[start:] if c.method == "delete_if_unchanged"]
    assert sizes == [2, 2, 2, 1]
    assert_each_delete_follows_a_wait_then_its_own_recheck(waits_rechecks_and_deletes(world, start))


def test_a_store_that_does_not_wait_gets_its_own_batches_behind_the_deferred_store(tmp_path: Path) -> None:
    """The sidecar's row store attaches at first use (DeferredRowStore) to whatever its factory makes;
    the batches are that store's, as they are unwrapped."""
    world, start, report = deleting_sweep(
        tmp_path,
        ScriptedRowStore,
        orphans=5,
        delete_batch_rows=2,
        wrap=lambda rows: DeferredRowStore(lambda: rows),
    )

    assert report.outcome is Outcome.COMPLETED and report.counts.deleted == 5, report.reason
    sizes = [c.n for c in world.state.timeline.calls[start:] if c.method == "delete_if_unchanged"]
    assert sizes == [2, 2, 1]


class ProtocolRows:
    """A user's row store written to the protocol's four methods alone, without the base class."""

    def partitions(self) -> list[str]:
        return []

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return {}

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        return {}

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        return set()


def test_a_store_without_batches_of_its_own_deletes_in_the_default_batches_in_the_plans_order() -> None:
    keys = [f"orphan-{i}" for i in range(2 * DELETE_BATCH_ROWS + 1)]

    batches = list(as_row_store(ProtocolRows()).delete_batches(STAGING, keys))

    assert [len(batch) for batch in batches] == [DELETE_BATCH_ROWS, DELETE_BATCH_ROWS, 1]
    assert [key for batch in batches for key in batch] == keys
