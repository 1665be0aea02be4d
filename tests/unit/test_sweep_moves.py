"""No live reference missed: a reference that moves while a sweep runs, and a machine of every move.

1. `test_reference_moving_once_is_never_missed`, exhaustive and deterministic. A staging row that sweeps
   saw unreferenced for longer than the grace, and that then got referenced (so its first-seen record is
   old: one sweep that misses its reference deletes it), moves once, make-before-break (add the new
   reference, then remove the old), between two of admission, manifest and tag row, right before any one
   call the sweep makes to a store, up to its last re-check. Every ordered pair of sources times every
   such call: the row is never deleted.

2. `MovesMachine`, a hypothesis state machine: publishers admit, release, write tag rows and manifests
   (active, retired, removed), checkpoints fence, write a manifest and unfence, writers rewrite rows, the
   clock jumps past the grace with no sweep, a second config without the partition sweeps for a while,
   and inside a sweep, before any calls it makes, references hop by the protocol (any number of times,
   between any sources), move once outside it (in one step or two), an orphan is adopted by the
   protocol, a fresh admission or a fenced checkpoint names a row, or the lease expires and another
   sweeper sweeps, or the state store goes away and comes back with its data (the kit's blocks ran
   unprotected meanwhile: an orphan adopted with no admission) or empty (the kit re-admits). Invariants:
   - a row deleted is not referenced when deleted (except a reference made after the sweep's last
     re-check: TQ has no compare-and-delete, no collector over it closes that window);
   - a row deleted was seen unreferenced by sweeps over at least a full grace, with no gap longer than
     the grace between two of those sweeps (a reference that came and went between two sweeps, or inside
     one, is invisible to any sampling collector, so the model gives the collector the benefit of it);
   - a sweeper whose lease was taken writes no first-seen record, audit entry or run summary after, and
     deletes at most the batch it had in flight; every deleted row is in the audit.

Hypothesis profiles (tests/unit/conftest.py): `ci` by default, `thorough` (10,000 examples) with
HYPOTHESIS_PROFILE=thorough.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import permutations
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from tools.testbed.clock import ManualClock
from tq_gc.config import Config, parse_config
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import SweepReport
from tq_gc.sweep import Collector

from support.baseline import with_old_baseline
from support.scripted_store import Action, Call, ScriptedRowStore, ScriptedState, Timeline

STAGING, DATA, SCRATCH = "rollout_staging", "rollout_data", "rollout_scratch"
SOURCES = ("admission", "manifest", "tag")
GRACE_S = 60
LEASE_TTL_S = 30  # the collectors' (a test-only parameter: the lease's TTL is no setting)
FOREVER_S = 10**8  # admissions and fences that never expire on their own: the model does not age them
DELETE_BATCH_ROWS = 2  # small delete batches: the sweep re-checks before each, a move may come between
RECHECK = "recheck"  # the state call that opens every delete batch
BASE_TAG_ROW = "g-base"  # the tag partition always exists: a missing one fails its source closed


def config_for(manifest_dir: Path, scope: str = STAGING) -> Config:
    return parse_config(
        {
            "namespace": "moves",
            "scope": [{"partition": scope, "all_keys": True}],
            "grace_seconds": GRACE_S,
            "manifests": [{"glob": f"{manifest_dir}/*.json"}],
            "tag_references": [{"partition": DATA, "key_path": "plan.keys", "target_partition": STAGING}],
            "limits": {"max_delete_fraction": 1.0},
        }
    )


class Publishers:
    """Everything that references staging rows, written through the real interfaces, and the ground
    truth of what is referenced (the model). `changed` runs after every single write."""

    def __init__(self, registry: AdmissionRegistry, rows: ScriptedRowStore, manifest_dir: Path) -> None:
        self.registry = registry
        self.rows = rows
        self.manifest_dir = manifest_dir
        self.admissions: dict[str, frozenset[str]] = {}
        self.manifests: dict[str, frozenset[str]] = {}  # active ones; retired or removed ones are absent
        self.tags: dict[str, frozenset[str]] = {}
        self.changed: list[Any] = []
        manifest_dir.mkdir(parents=True, exist_ok=True)
        rows.put(DATA, BASE_TAG_ROW, {"plan": {"keys": []}})

    def referenced(self) -> set[str]:
        return set().union(*self.admissions.values(), *self.manifests.values(), *self.tags.values())

    def sources_of(self, key: str) -> list[str]:
        held = {
            "admission": self.admissions.values(),
            "manifest": self.manifests.values(),
            "tag": self.tags.values(),
        }
        return [source for source, sets in held.items() if any(key in keys for keys in sets)]

    # -- one write each ---------------------------------------------------------------------------

    def admit(self, admission_id: str, keys: frozenset[str]) -> None:
        self.registry.admit(admission_id, {STAGING: sorted(keys)}, ttl_seconds=FOREVER_S)
        self.admissions[admission_id] = keys
        self._changed()

    def release(self, admission_id: str) -> None:
        self.registry.release(admission_id)
        self.admissions.pop(admission_id, None)
        self._changed()

    def write_manifest(self, name: str, keys: frozenset[str], state: str = "active") -> None:
        rows = {STAGING: sorted(keys)}
        doc = {"format": "tq-gc/manifest/v1", "manifest_id": name, "state": state, "rows": rows}
        path = self.manifest_dir / f"{name}.json"
        temporary = path.with_suffix(".tmp")  # written whole, then renamed: a reader never sees half
        temporary.write_text(json.dumps(doc))
        temporary.replace(path)
        if state == "active":
            self.manifests[name] = keys
        else:
            self.manifests.pop(name, None)
        self._changed()

    def remove_manifest(self, name: str) -> None:
        (self.manifest_dir / f"{name}.json").unlink(missing_ok=True)
        self.manifests.pop(name, None)
        self._changed()

    def write_tag_row(self, row: str, keys: frozenset[str]) -> None:
        self.rows.put(DATA, row, {"plan": {"keys": sorted(keys)}})
        self.tags[row] = keys
        self._changed()

    def delete_tag_row(self, row: str) -> None:
        self.rows.delete(DATA, [row])
        self.tags.pop(row, None)
        self._changed()

    def fence(self, name: str) -> None:
        self.registry.fence(name, ttl_seconds=FOREVER_S)

    def unfence(self, name: str) -> None:
        self.registry.unfence(name)

    def _changed(self) -> None:
        for callback in self.changed:
            callback()

    # -- a reference, by source -------------------------------------------------------------------

    def add(self, source: str, key: str, holder: str = "1") -> None:
        """Reference `key` from `source` (holder names the admission, manifest or tag row)."""
        if source == "admission":
            self.admit(f"a{holder}", self.admissions.get(f"a{holder}", frozenset()) | {key})
        elif source == "manifest":
            self.write_manifest(f"m{holder}", self.manifests.get(f"m{holder}", frozenset()) | {key})
        else:
            self.write_tag_row(f"g{holder}", self.tags.get(f"g{holder}", frozenset()) | {key})

    def remove(self, source: str, key: str, keep_empty: bool = True) -> None:
        """Stop referencing `key` from `source`, wherever it names it. An emptied admission is released;
        an emptied manifest is retired and an emptied tag row rewritten, or both deleted (`keep_empty`)."""
        if source == "admission":
            for admission_id, keys in sorted(self.admissions.items()):
                if key in keys:
                    if keys - {key}:
                        self.admit(admission_id, keys - {key})
                    else:
                        self.release(admission_id)
        elif source == "manifest":
            for name, keys in sorted(self.manifests.items()):
                if key in keys:
                    rest = keys - {key}
                    if rest:
                        self.write_manifest(name, rest)
                    elif keep_empty:
                        self.write_manifest(name, keys, state="retired")
                    else:
                        self.remove_manifest(name)
        else:
            for row, keys in sorted(self.tags.items()):
                if key in keys and (keys - {key} or keep_empty):
                    self.write_tag_row(row, keys - {key})
                elif key in keys:
                    self.delete_tag_row(row)

    def move(self, key: str, old: str, new: str, keep_empty: bool = True) -> None:
        """Make-before-break: the new reference is written before the old one is removed."""
        self.add(new, key, holder="-moved")
        self.remove(old, key, keep_empty)

    def hop(self, key: str, old: str, new: str, keep_empty: bool = True) -> None:
        """A move by the documented protocol, `GcClient.holding()`: admit the key, write the new
        reference, remove the old one, release. Any number of hops may come inside one sweep."""
        self.admit("hop", frozenset({key}))
        self.add(new, key, holder=f"-hop-{new}")
        self.remove(old, key, keep_empty)
        self.release("hop")

    def adopt(self, key: str, new: str) -> None:
        """An orphan taken up by the documented protocol: admit, write the reference, release."""
        self.admit("adopt", frozenset({key}))
        self.add(new, key, holder="-adopted")
        self.release("adopt")


# -- 1. one move, every pair of sources, every step of the sweep -----------------------------------

MOVER = "k/moving"
ORPHANS = ("a/orphan0", "a/orphan1", "z/orphan2")  # eligible too: the sweep deletes in batches, re-checking


class World:
    def __init__(self, manifest_dir: Path) -> None:
        self.timeline = Timeline()
        self.clock = ManualClock()
        self.state = ScriptedState("moves", clock_ms=self.clock, timeline=self.timeline)
        with_old_baseline(self.state)
        self.rows = ScriptedRowStore(self.timeline, delete_batch_rows=DELETE_BATCH_ROWS)
        self.publishers = Publishers(AdmissionRegistry(self.state), self.rows, manifest_dir)
        self.config = config_for(manifest_dir)

    def sweep(self) -> SweepReport:
        collector = Collector(
            self.config, self.state, self.rows, holder="sidecar", lease_ttl_seconds=LEASE_TTL_S
        )
        return collector.sweep(dry_run=False)


def world_about_to_sweep(manifest_dir: Path, source: str | None) -> World:
    """The mover and the orphans seen unreferenced for 80 s by sweeps 40 s apart (grace 60 s), then the
    mover referenced from `source`: the next sweep deletes it unless it sees that reference."""
    world = World(manifest_dir)
    for key in (MOVER, *ORPHANS):
        world.rows.put(STAGING, key, {"v": 1})
    for _ in range(2):
        world.sweep()
        world.clock.advance(GRACE_S * 2 / 3)
    if source is not None:
        world.publishers.add(source, MOVER)
    return world


def hook_points(manifest_dir: Path, source: str | None, keep: bool = True) -> list[Call]:
    """Every call a sweep makes, up to its last re-check, on a world where nothing moves (the mover
    referenced from `source`, kept; or an orphan, deleted when `keep` is False)."""
    world = world_about_to_sweep(manifest_dir, source)
    start = world.timeline.position
    world.sweep()
    calls = world.timeline.calls[start:]
    last_recheck = max((call.position for call in calls if call.method == RECHECK), default=None)
    assert last_recheck is not None, f"the sweep made no {RECHECK}() call: {[c.describe() for c in calls]}"
    kept = MOVER in world.rows.keys(STAGING)
    assert kept == keep, f"{MOVER} referenced by {source}, nothing moving: kept={kept}, expected {keep}"
    return [replace(call, position=call.position - start) for call in calls if call.position <= last_recheck]


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tqgc-moves-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def points_that_lose_the_mover(
    scratch: Path, source: str | None, points: list[Call], action_for: Callable[[World], Action]
) -> list[str]:
    """For each hook point, a fresh world about to sweep, `action_for(world)` slipped in right before
    that call: the points after whose action the sweep deleted the mover."""
    lost: list[str] = []
    for point in points:
        world = world_about_to_sweep(scratch / f"at-{point.position}", source)
        world.timeline.at(world.timeline.position + point.position, action_for(world))
        world.sweep()
        world.timeline.raise_errors()
        assert world.timeline.pending() == 0, f"the action before {point.describe()} never ran"
        if MOVER not in world.rows.keys(STAGING):
            lost.append(point.describe())
    return lost


def test_unreferenced_mover_is_deleted_by_the_sweep(scratch: Path) -> None:
    """The control: the scenario below is not vacuous, one missed reference and the mover goes."""
    world = world_about_to_sweep(scratch, source=None)
    report = world.sweep()
    assert world.rows.keys(STAGING) == set(), report
    assert world.state.load_first_seen(STAGING) == {}


# The manifest or tag row a reference leaves is retired or rewritten, or deleted; an admission is released.
MOVES = [
    pytest.param(old, new, keep_empty, id=f"{old}-to-{new}" + ("" if keep_empty else "-old-deleted"))
    for old, new in permutations(SOURCES, 2)
    for keep_empty in ([True] if old == "admission" else [True, False])
]


@pytest.mark.parametrize(("old", "new", "keep_empty"), MOVES)
def test_reference_moving_once_is_never_missed(scratch: Path, old: str, new: str, keep_empty: bool) -> None:
    points = hook_points(scratch / "baseline", old)
    missed = points_that_lose_the_mover(
        scratch, old, points, lambda world: partial(world.publishers.move, MOVER, old, new, keep_empty)
    )
    assert not missed, (
        f"a reference moving {old} -> {new} (make-before-break) was missed and its row deleted when the "
        f"move came right before these calls of the sweep ({len(missed)} of {len(points)}): {missed}"
    )


# Routes of two hops each (old -> middle -> new). The second hop takes the reference back to where the
# first found it, or on to the third source: the soak's hot groups did both, many times per sweep.
HOP_ROUTES = [
    pytest.param(route, id="-".join(route))
    for route in (
        ("tag", "manifest", "tag"),
        ("manifest", "tag", "manifest"),
        ("admission", "tag", "manifest"),
        ("tag", "admission", "manifest"),
        ("manifest", "admission", "tag"),
    )
]


@pytest.mark.parametrize("route", HOP_ROUTES)
def test_reference_hopping_by_the_protocol_is_never_missed(scratch: Path, route: tuple[str, ...]) -> None:
    """Two hops by the protocol, right before any two calls of the sweep (every pair, in order): the
    row is never deleted. Read order alone cannot cover this: a reference that leaves a source before
    its read and reaches the next one after that one's read is in none of them when each is read."""
    first, middle, last = route
    points = hook_points(scratch / "baseline", first)
    missed: list[str] = []
    for i, j in itertools.combinations(range(len(points)), 2):
        world = world_about_to_sweep(scratch / f"at-{i}-{j}", first)
        start = world.timeline.position
        world.timeline.at(start + points[i].position, partial(world.publishers.hop, MOVER, first, middle))
        world.timeline.at(start + points[j].position, partial(world.publishers.hop, MOVER, middle, last))
        world.sweep()
        world.timeline.raise_errors()
        assert world.timeline.pending() == 0, f"a hop before {points[i].describe()} never ran"
        if MOVER not in world.rows.keys(STAGING):
            missed.append(f"{points[i].describe()} then {points[j].describe()}")
    assert not missed, (
        f"a reference hopping {' -> '.join(route)} by the protocol was missed and its row deleted, the "
        f"hops right before these calls ({len(missed)} of {len(points) * (len(points) - 1) // 2}): {missed}"
    )


@pytest.mark.parametrize("new", ["tag", "manifest"])
def test_orphan_adopted_by_the_protocol_during_the_sweep_is_kept(scratch: Path, new: str) -> None:
    """An orphan past its grace, taken up (admit, write the tag row or manifest naming it, release)
    right before any call of the sweep up to its last re-check, after the reads that would show it."""
    points = hook_points(scratch / "baseline", source=None, keep=False)
    lost = points_that_lose_the_mover(
        scratch, None, points, lambda world: partial(world.publishers.adopt, MOVER, new)
    )
    assert not lost, (
        f"an orphan adopted into a {new} by the protocol during the sweep was deleted, adopted right before "
        f"these calls ({len(lost)} of {len(points)}): {lost}"
    )


def adopted_while_the_store_was_away(world: World, new: str) -> None:
    """The state store down for everyone, then back with its data (the lease survived): the kit's
    holding() could not admit, so it wrote the reference with no admission, in no write barrier."""
    world.publishers.add(new, MOVER, holder="-outage")
    world.state.restart_with_data()


@pytest.mark.parametrize("new", ["tag", "manifest"])
def test_orphan_adopted_while_the_store_was_away_is_kept(scratch: Path, new: str) -> None:
    """Issue 32, hole 3: the store went away and came back with its data right before any call of the
    sweep up to its last re-check; meanwhile an orphan past its grace was taken up outside any barrier.
    The sweep that lived through the outage deletes nothing more."""
    points = hook_points(scratch / "baseline", source=None, keep=False)
    lost = points_that_lose_the_mover(
        scratch, None, points, lambda world: partial(adopted_while_the_store_was_away, world, new)
    )
    assert not lost, (
        f"an orphan adopted into a {new} while the state store was away was deleted, the store back right "
        f"before these calls ({len(lost)} of {len(points)}): {lost}"
    )


# -- 2. the machine ---------------------------------------------------------------------------------

KEYS = ("r0", "r1", "r2", "r3")
key = st.sampled_from(KEYS)
key_sets = st.frozensets(key, max_size=3)
source = st.sampled_from(SOURCES)
holder = st.sampled_from(["0", "1"])
MAX_HOOK_POINT = 24  # a sweep here makes about 20 calls; later points never come, and that is fine


@dataclass(frozen=True)
class Slip:
    """Something done right before call `at` (counted from 0) of a sweep."""

    at: int
    action: str
    old: str = "admission"
    new: str = "tag"
    pick: int = 0  # which row: 0 is the one most at risk (seen unreferenced the longest)


hook_point = st.integers(0, MAX_HOOK_POINT)
pick = st.integers(0, 3)
source_pairs = st.sampled_from(list(permutations(SOURCES, 2)))
# A move outside the protocol (make-before-break with no admission) is covered once per sweep, by the
# order of the reads; a hop (a move inside an admission) any number of times, by the barrier.
raw_move = st.builds(
    lambda at, pair, pick: Slip(at, "move", pair[0], pair[1], pick), hook_point, source_pairs, pick
)


def route(start: int, turns: list[int]) -> list[str]:
    """Sources from SOURCES[start], each next one another source than the one before."""
    path = [SOURCES[start]]
    for turn in turns:
        path.append(SOURCES[(SOURCES.index(path[-1]) + turn) % len(SOURCES)])
    return path


routes = st.builds(route, st.integers(0, 2), st.lists(st.integers(1, 2), min_size=2, max_size=6))
# A hot reference: the row most at risk hops along `route`, one hop every `every` calls of the sweep.
hot_hops = st.builds(
    lambda at, every, route: [
        Slip(at + k * every, "hop", old, new) for k, (old, new) in enumerate(itertools.pairwise(route))
    ],
    st.integers(0, MAX_HOOK_POINT // 2),
    st.integers(1, 4),
    routes,
)
slips = st.one_of(
    st.builds(lambda at, pair, pick: Slip(at, "hop", pair[0], pair[1], pick), hook_point, source_pairs, pick),
    st.builds(Slip, hook_point, st.just("adopt"), new=st.sampled_from(["manifest", "tag"]), pick=pick),
    st.builds(Slip, hook_point, st.just("make"), new=source, pick=pick),
    st.builds(Slip, hook_point, st.just("break"), old=source, pick=pick),
    st.builds(Slip, hook_point, st.sampled_from(["admit", "rewrite"]), pick=pick),
    st.builds(Slip, hook_point, st.just("checkpoint"), pick=pick),
    st.builds(Slip, hook_point, st.just("lease_expires")),
    # The state store goes away and comes back, with its data or empty (issue 32, holes 3 and 8).
    st.builds(
        Slip, hook_point, st.just("outage_with_data"), new=st.sampled_from(["manifest", "tag"]), pick=pick
    ),
    st.builds(Slip, hook_point, st.just("restart_empty"), pick=pick),
)


@dataclass
class Streak:
    """Sweeps that may have seen a row unreferenced, each at most a grace after the one before."""

    first_ms: int  # when the first of them started
    last_ms: tuple[int, int]  # when the latest started and when it recorded what it saw
    first_sweep: int  # the first one's Watch.number: no row is deleted on first sight
    gap_before_ms: int | None = None  # it started because no sweep had observed the row for this long


@dataclass
class Watch:
    """What the model knows of one sweep while it runs."""

    number: int  # the machine's sweeps, counted from 0
    holder: str
    nested: bool  # run from a hook, inside another sweep
    start_ms: int
    held: set[str]  # rows referenced at every instant of the sweep so far
    listed: bool = False  # it listed the staging partition
    # It recorded what it saw (its first first-seen write, made holding its lease): from then on, later
    # sweeps may count on its observation. A sweep that lost its lease before that observed nothing.
    observed: bool = False
    lost_lease_at: int | None = None  # timeline position at which another sweeper took its lease
    first_seen_then: dict[str, Any] = field(default_factory=dict)
    audit_then: set[tuple[str, str, str]] = field(default_factory=set)
    runs_then: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    wiped: bool = False  # the state store restarted empty during it: its audit went with everything else


class MovesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tqgc-machine-"))
        self.timeline = Timeline()
        self.clock = ManualClock()
        self.state = ScriptedState("moves", clock_ms=self.clock, timeline=self.timeline)
        self.rows = ScriptedRowStore(self.timeline, delete_batch_rows=DELETE_BATCH_ROWS)
        self.pub = Publishers(AdmissionRegistry(self.state), self.rows, self.dir)
        self.config = config_for(self.dir)
        self.other_config = config_for(self.dir, scope=SCRATCH)
        self.streaks: dict[str, Streak] = {}
        self.chain_since: dict[str, int] = {}  # referenced row -> timeline position it got referenced at
        self.was_referenced: set[str] = set()
        self.active: list[Watch] = []
        self.sweeps = itertools.count()
        self.pub.changed.append(self.references_changed)
        self.state.spies.append(self.spy)
        self.rows.spies.append(self.spy)
        for k in KEYS:
            self.write(k)

    # -- the model ------------------------------------------------------------------------------

    def references_changed(self) -> None:
        now = self.pub.referenced()
        for key in now - self.was_referenced:
            self.chain_since[key] = self.timeline.position
        for key in self.was_referenced - now:
            del self.chain_since[key]
        for watch in self.active:
            watch.held &= now
        self.was_referenced = now

    def spy(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        if not self.active:
            return
        watch = self.active[-1]
        if method in ("list_rows", "list_keys") and args[:1] == (STAGING,):
            watch.listed = True
        elif method == "save_first_seen":
            self.observe(watch)
        elif method == "delete_if_unchanged":
            partition = args[0] if args else kwargs["partition"]
            assert partition == STAGING, f"{watch.holder} deleted in {partition!r}, out of scope"
            for deleted in sorted(result):
                self.check_deletable(watch, deleted)

    def check_deletable(self, watch: Watch, row: str) -> None:
        now = self.clock()
        if row in self.was_referenced:
            since = self.chain_since[row]
            last_recheck = self.last_recheck_before(self.timeline.position - 1)
            unclosable = not watch.nested and last_recheck is not None and since > last_recheck
            assert unclosable, (
                f"{row} deleted by {watch.holder} while referenced by {self.pub.sources_of(row)} "
                f"(since timeline #{since}; the sweep's last {RECHECK} at #{last_recheck})"
            )
            if row not in self.streaks:
                # Referenced after the batch's last re-check (the window no re-check can close), and a
                # sweeper that took the lease meanwhile saw it referenced throughout and ended its
                # streak: the streak this batch was planned on is gone from the model, not from history.
                return
        streak = self.streaks.get(row)
        first_sight = streak is None or streak.first_sweep == watch.number  # this sweep started it
        if streak is None:
            gap_ms = None
        else:
            gap_ms = streak.gap_before_ms if first_sight else watch.start_ms - streak.last_ms[1]
        assert gap_ms is None or gap_ms <= GRACE_S * 1000, (
            f"{row} deleted by {watch.holder} after {gap_ms / 1000:g} s in which no sweep observed it "
            f"(grace {GRACE_S} s): grace must count only observed time"
        )
        assert streak is not None and not first_sight, (
            f"{row} deleted by {watch.holder}: no earlier sweep saw it unreferenced"
        )
        assert now - streak.first_ms >= GRACE_S * 1000, (
            f"{row} deleted by {watch.holder} after sweeps saw it unreferenced for only "
            f"{(now - streak.first_ms) / 1000:g} s (grace {GRACE_S} s)"
        )
        del self.streaks[row]
        watch.deleted.add(row)
        event("a sweep deleted a row" + (" (the sweeper that took the lease)" if watch.nested else ""))

    def last_recheck_before(self, position: int) -> int | None:
        calls = self.timeline.calls[:position]
        return next((call.position for call in reversed(calls) if call.method == RECHECK), None)

    def observe(self, watch: Watch) -> None:
        """When a sweep records what it saw: extend or start the streak of each row it may have seen
        unreferenced, end it for rows referenced throughout the sweep so far."""
        if watch.observed or watch.lost_lease_at is not None:
            return
        watch.observed = True
        end_ms = self.clock()
        for row in self.rows.keys(STAGING):
            streak = self.streaks.get(row)
            if row in watch.held:
                self.streaks.pop(row, None)
            elif streak is not None and watch.start_ms - streak.last_ms[1] <= GRACE_S * 1000:
                streak.first_ms = min(streak.first_ms, watch.start_ms)
                streak.last_ms = (watch.start_ms, max(end_ms, streak.last_ms[1]))
            else:
                gap_ms = watch.start_ms - streak.last_ms[1] if streak is not None else None
                self.streaks[row] = Streak(watch.start_ms, (watch.start_ms, end_ms), watch.number, gap_ms)

    def at_risk(self, rows: set[str]) -> list[str]:
        """Rows, the longest seen unreferenced first: where a missed reference costs a row."""
        never = self.clock() + 1
        return sorted(rows, key=lambda row: (getattr(self.streaks.get(row), "first_ms", never), row))

    # -- sweeps ---------------------------------------------------------------------------------

    def run_sweep(self, config: Config, holder: str, nested: bool = False) -> SweepReport:
        watch = Watch(next(self.sweeps), holder, nested, self.clock(), set(self.was_referenced))
        self.active.append(watch)
        try:
            collector = Collector(config, self.state, self.rows, holder=holder, lease_ttl_seconds=LEASE_TTL_S)
            report = collector.sweep(dry_run=False)
        finally:
            self.active.pop()
            if not nested:
                self.timeline.clear()  # slips whose call never came
        if not nested:
            self.timeline.raise_errors()  # an assertion inside the sweep (a spy, a slip): it was swallowed
        cause = getattr(report, "cause", None)  # why it stopped, if it did
        assert str(cause) != "error", f"{holder}'s sweep failed unexpectedly: {report.reason}"
        event(f"sweep {report.outcome.value}: {cause}")
        with self.timeline.quietly():
            audited = {
                row.key for row in self.state.read_audit(report.run_id, 10_000) if row.partition == STAGING
            }
            assert watch.wiped or watch.deleted <= audited, (
                f"{holder} deleted {watch.deleted - audited} and did not audit them"
            )
            if watch.lost_lease_at is not None:
                self.check_wrote_nothing_after_losing_its_lease(watch, report)
        if watch.listed:
            self.observe(watch)  # if it listed and wrote no record, at its end
        return report

    def check_wrote_nothing_after_losing_its_lease(self, watch: Watch, report: SweepReport) -> None:
        assert watch.lost_lease_at is not None
        after = [call for call in self.timeline.calls if call.position >= watch.lost_lease_at]
        deletes = [call for call in after if call.method == "delete_if_unchanged"]
        rechecks = [call for call in after if call.method == RECHECK]
        in_flight = not rechecks or deletes[:1] == [] or deletes[0].position < rechecks[0].position
        assert len(deletes) <= 1 and in_flight, (
            f"{watch.holder} lost its lease, then deleted more than its batch in flight: "
            f"{[c.describe() for c in after]}"
        )
        assert self.state.load_first_seen(STAGING) == watch.first_seen_then, (
            f"{watch.holder} wrote first-seen records after another sweeper took its lease"
        )
        audit = self.audit_rows()
        assert audit - watch.audit_then == set(), (
            f"{watch.holder} wrote the audit after another sweeper took its lease: {audit - watch.audit_then}"
        )
        runs = {run["run_id"] for run in self.state.recent_runs(1000)}
        assert report.run_id not in runs - watch.runs_then, (
            f"{watch.holder} recorded its run ({report.outcome.value}) after another sweeper took its lease"
        )

    def audit_rows(self) -> set[tuple[str, str, str]]:
        return {(row.run_id, row.partition, row.key) for row in self.state.read_audit(None, 100_000)}

    @rule(
        slips=st.lists(slips, max_size=4),
        hot=st.lists(hot_hops, max_size=2),
        move=st.none() | raw_move,
        then_s=st.sampled_from([10, 30, 45, 59]),
    )
    def sweep(self, slips: list[Slip], hot: list[list[Slip]], move: Slip | None, then_s: int) -> None:
        """The sidecar's schedule: a sweep, with `slips` inside (and hot references hopping many times),
        then a while before the next one."""
        start = self.timeline.position
        for slip in [*slips, *itertools.chain.from_iterable(hot), *([move] if move else [])]:
            self.timeline.at(start + slip.at, partial(self.slip, slip))
        self.run_sweep(self.config, "sidecar")
        self.clock.advance(then_s)

    @rule(sweeps=st.integers(1, 3), then_s=st.sampled_from([10, 30, 45, 59]))
    def sweeps_go_by(self, sweeps: int, then_s: int) -> None:
        """Quiet sweeps on schedule: how rows age out of their grace."""
        for _ in range(sweeps):
            self.run_sweep(self.config, "sidecar")
            self.clock.advance(then_s)

    @rule(sweeps=st.integers(1, 3), seconds=st.sampled_from([20, 45, 61]))
    def another_scope_sweeps_for_a_while(self, sweeps: int, seconds: int) -> None:
        """A config without the staging partition (an operator's edit, a second job's sweeper)."""
        for _ in range(sweeps):
            self.run_sweep(self.other_config, "sidecar")
            self.clock.advance(seconds)

    # -- inside a sweep -------------------------------------------------------------------------

    def slip(self, slip: Slip) -> None:
        event(f"inside a sweep: {slip.action}")
        referenced = self.at_risk(self.was_referenced)
        anyone = self.at_risk(self.rows.keys(STAGING)) or list(KEYS)
        if slip.action in ("move", "hop", "make", "break"):
            if slip.action != "make":
                referenced = [row for row in referenced if slip.old in self.pub.sources_of(row)]
            if not referenced:
                return
            row = referenced[slip.pick % len(referenced)]
            if slip.action == "move":
                self.pub.move(row, slip.old, slip.new, keep_empty=slip.pick % 2 == 0)
            elif slip.action == "hop":
                self.pub.hop(row, slip.old, slip.new, keep_empty=slip.pick % 2 == 0)
            elif slip.action == "make":
                self.pub.add(slip.new, row, holder="-made")
            else:
                self.pub.remove(slip.old, row, keep_empty=slip.pick % 2 == 0)
        elif slip.action == "adopt":  # an orphan, the longest unreferenced first, taken up by the protocol
            self.pub.adopt(anyone[slip.pick % len(anyone)], slip.new)
        elif slip.action == "admit":  # a fresh admission: the re-check before each batch sees it
            self.pub.add("admission", anyone[slip.pick % len(anyone)], holder="-fresh")
        elif slip.action == "checkpoint":  # fence, write a manifest naming a row, unfence
            self.pub.fence("checkpoint")
            self.pub.add("manifest", anyone[slip.pick % len(anyone)], holder="-ckpt")
            self.pub.unfence("checkpoint")
        elif slip.action == "rewrite":
            self.write(anyone[slip.pick % len(anyone)])
        elif slip.action == "outage_with_data":
            self.outage_with_data(anyone[slip.pick % len(anyone)], slip.new)
        elif slip.action == "restart_empty":
            self.state_store_restarted_empty()
        else:
            self.lease_expires_and_another_sweeper_sweeps()

    def outage_with_data(self, orphan: str, new: str) -> None:
        """The state store is down for everyone, then back with its data (an append-only file, a
        failover): the lease survived. Meanwhile the kit's holding() could not admit, so its block ran
        unprotected: an orphan was taken up with no admission, in no write barrier. The sweep that lived
        through it must delete nothing more (a failed renewal or another server process ends it)."""
        self.pub.add(new, orphan, holder="-outage")
        self.state.restart_with_data()

    def state_store_restarted_empty(self) -> None:
        """The state store restarts without its data: lease, admissions, fences, first-seen records and
        the sources' baseline gone. The kit re-admits what its blocks hold (GcClient renews and finds its
        admission gone), here at once."""
        self.state.restart_empty()
        for watch in self.active:  # a sweeper that lost its lease: what it must leave is now nothing
            watch.wiped = True
            if watch.lost_lease_at is not None:
                watch.first_seen_then = self.state.load_first_seen(STAGING)
                watch.audit_then, watch.runs_then = self.audit_rows(), set()
        for admission_id, keys in sorted(self.pub.admissions.items()):
            self.pub.registry.admit(admission_id, {STAGING: sorted(keys)}, ttl_seconds=FOREVER_S)

    def lease_expires_and_another_sweeper_sweeps(self) -> None:
        watch = self.active[-1]
        lease = self.state.lease_holder()
        ours = lease is not None and lease.holder == watch.holder
        self.clock.advance(LEASE_TTL_S + 1)
        if ours and watch.lost_lease_at is None:
            watch.lost_lease_at = self.timeline.position
        self.run_sweep(self.config, "cronjob", nested=True)
        if watch.lost_lease_at is not None:  # what it must leave as it is from now on
            watch.first_seen_then = self.state.load_first_seen(STAGING)
            watch.audit_then = self.audit_rows()
            watch.runs_then = {run["run_id"] for run in self.state.recent_runs(1000)}

    # -- between sweeps: publishers, writers, the clock -----------------------------------------

    @rule(k=key)
    def write(self, k: str) -> None:
        self.rows.put(STAGING, k, {"written_ms": self.clock()})
        self.streaks.pop(k, None)  # a new row: its grace starts afresh

    @rule(k=key)
    def finalizer_deletes(self, k: str) -> None:
        self.rows.delete(STAGING, [k])
        self.streaks.pop(k, None)

    @rule(admission=holder, keys=key_sets)
    def admission(self, admission: str, keys: frozenset[str]) -> None:
        """Admit `keys` (replacing what the admission held), or release it when there are none."""
        if keys:
            self.pub.admit(f"a{admission}", keys)
        else:
            self.pub.release(f"a{admission}")

    @rule(name=holder, keys=key_sets, state=st.sampled_from(["active", "retired", "removed"]))
    def manifest(self, name: str, keys: frozenset[str], state: str) -> None:
        if state == "removed":
            self.pub.remove_manifest(f"m{name}")
        else:
            self.pub.write_manifest(f"m{name}", keys, state)

    @rule(row=holder, keys=key_sets, delete=st.booleans())
    def tag_row(self, row: str, keys: frozenset[str], delete: bool) -> None:
        if delete:
            self.pub.delete_tag_row(f"g{row}")
        else:
            self.pub.write_tag_row(f"g{row}", keys)

    @rule(sweeps=st.integers(1, 3), seconds=st.sampled_from([20, 45, 61]))
    def fenced_for_a_while(self, sweeps: int, seconds: int) -> None:
        """A long checkpoint: every sweep is skipped while its fence is up, and observes nothing."""
        self.pub.fence("long-checkpoint")
        for _ in range(sweeps):
            self.run_sweep(self.config, "sidecar")
            self.clock.advance(seconds)
        self.pub.unfence("long-checkpoint")

    @rule(new=source, holder=holder)
    def the_longest_orphan_is_referenced(self, new: str, holder: str) -> None:
        """The row seen unreferenced the longest gets a reference: one sweep that misses it deletes it."""
        orphans = [row for row in self.at_risk(set(self.streaks)) if row not in self.was_referenced]
        if orphans:
            self.pub.add(new, orphans[0], holder=holder)

    @rule(sweeps=st.integers(0, 2), every_s=st.sampled_from([5, 10]))
    def sidecar_restarts(self, sweeps: int, every_s: int) -> None:
        """The memory:// sidecar killed and started again: its registry and first-seen records are empty.
        The publishers' clients find it and admit again within their renewal period (a third of the
        grace); the sweeps of the new sidecar before that must delete none of their rows."""
        self.state = ScriptedState("moves", clock_ms=self.clock, timeline=self.timeline)
        self.state.spies.append(self.spy)
        self.pub.registry = AdmissionRegistry(self.state)
        for _ in range(sweeps):  # at most 20 s: within one renewal period
            self.run_sweep(self.config, "sidecar")
            self.clock.advance(every_s)
        for admission_id, keys in self.pub.admissions.items():
            self.pub.registry.admit(admission_id, {STAGING: sorted(keys)}, ttl_seconds=FOREVER_S)

    @rule(seconds=st.sampled_from([61, 200]))
    def no_sweep_for(self, seconds: int) -> None:
        """A sweeper paused, a CronJob suspended: a gap longer than the grace that nothing observed."""
        self.clock.advance(seconds)

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


TestSweepMoves = MovesMachine.TestCase
TestSweepMoves.settings = settings(stateful_step_count=30, deadline=None)


@settings(max_examples=1, deadline=None)
@given(st.just(None))  # the machine records hypothesis events: it runs inside a hypothesis test
def test_a_row_adopted_after_its_batch_re_check_while_another_sweeper_takes_the_lease(_: None) -> None:
    """The machine's own find: a row adopted by the protocol between its batch's re-check and its clear
    (the window no re-check closes), while a CronJob takes the lease and sees it referenced. The delete
    in flight is the accepted one, and the model must not then claim no sweep saw the row unreferenced."""
    machine = MovesMachine()
    try:
        machine.sweep(hot=[], move=None, slips=[], then_s=30)
        machine.sweep(hot=[], move=None, slips=[Slip(0, "adopt", new="manifest", pick=0)], then_s=30)
        route = ["admission", "manifest", "tag", "admission"]
        hops = [Slip(k * 2, "hop", old, new) for k, (old, new) in enumerate(itertools.pairwise(route))]
        lease_then_adopt = [Slip(20, "lease_expires"), Slip(19, "adopt", new="manifest", pick=0)]
        machine.sweep(hot=[hops], move=None, slips=lease_then_adopt, then_s=10)
    finally:
        machine.teardown()
