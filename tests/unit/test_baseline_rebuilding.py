"""A store with no record of what the reference sources named (new, or restarted empty) does not trust
an empty source until its record is a grace old (references/emptied.py): the sweep skips, cause
baseline_rebuilding, and no row's grace advances meanwhile."""

from __future__ import annotations

from pathlib import Path

from tq_gc.report import Cause, Outcome
from tq_gc.state import MemoryState

from support.world import GRACE_S, STAGING, World

ORPHAN = "r1/c1"


def fresh_world(tmp_path: Path, **config: object) -> World:
    """A World whose store has no source baseline at all, as after a Redis restarted empty."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    world = World(tmp_path, **config)
    world.state = MemoryState("job-42", clock_ms=world.clock)  # type: ignore[assignment]
    world.rows.put(STAGING, ORPHAN)
    return world


def test_an_empty_source_skips_the_sweeps_of_a_fresh_store_for_a_grace_and_advances_no_grace(
    tmp_path: Path,
) -> None:
    world = fresh_world(tmp_path)
    first = world.sweep()
    assert (first.outcome, first.cause) == (Outcome.SKIPPED, Cause.BASELINE_REBUILDING), first.reason
    assert "manifests:" in (first.reason or "") and world.state.load_first_seen(STAGING) == {}
    world.age(GRACE_S / 2)
    assert world.sweep().cause is Cause.BASELINE_REBUILDING
    world.age(GRACE_S / 2)  # the record is a grace old now: the empty source is believed
    believed = world.sweep()
    assert believed.outcome is Outcome.COMPLETED and believed.counts.within_grace == 1, believed.reason
    world.age()
    assert world.sweep().counts.deleted == 1  # a grace after it was first seen, not before


def test_a_source_that_accepts_being_empty_or_is_accepted_does_not_wait_for_the_baseline(
    tmp_path: Path,
) -> None:
    accepted = fresh_world(tmp_path / "accepted")
    [source] = accepted.config.manifests
    empty_tags = {"tag_references": []}  # the tag source names no row: it would wait too
    assert accepted.sweep().cause is Cause.BASELINE_REBUILDING
    allowed = fresh_world(tmp_path / "allowed", **empty_tags)
    allowed.config = allowed.config.model_copy(
        update={"manifests": [source.model_copy(update={"when_empty": "accept"})]}
    )
    assert allowed.sweep().outcome is Outcome.COMPLETED
    accepted.config = accepted.config.model_copy(update={"tag_references": []})
    report = accepted.sweep(accept_empty=[source.source_id])
    assert report.outcome is Outcome.COMPLETED, report.reason


def test_a_source_that_names_rows_needs_no_baseline(tmp_path: Path) -> None:
    world = fresh_world(tmp_path)
    world.write_manifest(["r2/c1"])
    world.rows.put("rollout_data", "plan", {"route_assembly_plan": {"cleanup_staging_keys": ["r3/c1"]}})
    assert world.sweep().outcome is Outcome.COMPLETED


def test_a_grace_of_zero_never_waits(tmp_path: Path) -> None:
    world = fresh_world(tmp_path, grace_seconds=0, allow_short_grace=True)
    assert world.sweep().outcome is Outcome.COMPLETED
