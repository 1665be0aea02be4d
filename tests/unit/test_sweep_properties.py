"""Property test of the whole sweep against randomized interleavings.

A hypothesis state machine plays writers, admissions, manifests, tag references, the clock and sweeps,
and slips a publisher's action into the middle of a sweep (before it lists, while it reads its
references, between its plan and its re-check). Invariant: a row the sweep deletes was unreferenced, by
every source, for at least the grace period as far as sweeps can see it (it was not written, and no
sweep found it referenced, during the last grace period), and is not referenced when the sweep ends.

Two windows no sampling collector closes: a reference that comes and goes entirely between two sweeps,
and the moment between the last admission re-read and TQ's clear (TQ has no compare-and-delete). Grace
and make-before-break publishing are what close them in practice.

tests/unit/test_sweep_moves.py has the exhaustive moves and a machine of every other move (fences,
lease expiry, scope changes, clock jumps).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tools.testbed.clock import ManualClock
from tq_gc.config import parse_config
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.sweep import Collector

from support.scripted_store import ScriptedRowStore, ScriptedState

STAGING, DATA = "rollout_staging", "rollout_data"
KEYS = [f"r{i}/c" for i in range(3)]
GRACE_S = 60
# State calls a sweep makes between listing and its first re-check: where moving references get lost.
MOVE_POINTS = ["admissions_version", "live_admission_rows", "load_first_seen"]
key = st.sampled_from(KEYS)
key_sets = st.frozensets(key, max_size=3)


class SweepMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.clock = ManualClock()
        self.state = ScriptedState("prop", clock_ms=self.clock)
        self.rows = ScriptedRowStore(delete_batch_rows=2)
        self.registry = AdmissionRegistry(self.state)
        self.config = parse_config(
            {
                "scope": [{"partition": STAGING, "all_keys": True}],
                "grace_seconds": GRACE_S,
                "manifests": [{"glob": f"{self.dir}/*.json"}],
                "tag_references": [{"partition": DATA, "key_path": "plan.keys", "target_partition": STAGING}],
                "limits": {"max_delete_fraction": 1.0},
            }
        )
        self.admitted: dict[str, frozenset[str]] = {}
        self.manifest: frozenset[str] = frozenset()
        self.tagged: frozenset[str] = frozenset()
        self.last_held_ms: dict[str, int] = {}  # row -> last store time it was written or seen referenced
        self.rows.put(DATA, "g-base", {"plan": {"keys": []}})  # the tag partition exists: a missing one fails

    # -- what publishers do ---------------------------------------------------------------------

    def referenced(self) -> set[str]:
        return set().union(*self.admitted.values(), self.manifest, self.tagged)

    def touch(self, keys: set[str] | frozenset[str]) -> None:
        for k in keys:
            self.last_held_ms[k] = self.clock()

    @rule(k=key)
    def write(self, k: str) -> None:
        self.rows.put(STAGING, k, {"v": self.clock()})
        self.touch({k})

    def sweep_sees_references(self) -> None:
        self.touch(self.referenced())

    @rule(k=key)
    def finalizer_deletes(self, k: str) -> None:
        self.rows.delete(STAGING, [k])

    @rule(admission=st.sampled_from(["a1", "a2"]), keys=key_sets)
    def admit(self, admission: str, keys: frozenset[str]) -> None:
        self.registry.admit(admission, {STAGING: sorted(keys)}, ttl_seconds=10_000)
        self.admitted[admission] = keys

    @rule(admission=st.sampled_from(["a1", "a2"]))
    def release(self, admission: str) -> None:
        self.registry.release(admission)
        self.admitted.pop(admission, None)

    @rule(keys=key_sets)
    def checkpoint_manifest(self, keys: frozenset[str]) -> None:
        self.manifest = keys
        doc = {
            "format": "tq-gc/manifest/v1",
            "manifest_id": "m",
            "state": "active",
            "rows": {STAGING: sorted(keys)},
        }
        (self.dir / "m.json").write_text(json.dumps(doc))

    @rule(keys=key_sets)
    def route_plan(self, keys: frozenset[str]) -> None:
        self.tagged = keys
        self.rows.put(DATA, "g0_g0", {"plan": {"keys": sorted(keys)}})

    @rule(seconds=st.sampled_from([30, 59, 61, 200]))
    def time_passes(self, seconds: int) -> None:
        """The sidecar's schedule: a sweep, then time goes by."""
        self.sweep("none", "admit", 0)
        self.clock.advance(seconds)

    # -- the sweep, with a publisher slipped in -------------------------------------------------

    def slip(self, action: str, k: str) -> None:
        if action == "restore":  # manifest -> admission, make-before-break
            self.admit("a2", frozenset({k}))
            self.checkpoint_manifest(self.manifest - {k})
        elif action == "publish":  # admission -> tag row, make-before-break: admit, write the row, release
            holders = {a: keys for a, keys in self.admitted.items() if k in keys}
            if holders:
                self.route_plan(self.tagged | {k})
                for admission, keys in holders.items():
                    self.admit(admission, keys - {k})
        elif action == "admit":
            self.admit("a1", self.admitted.get("a1", frozenset()) | {k})
        else:
            self.write(k)

    @rule(
        point=st.sampled_from(["none", *MOVE_POINTS, "recheck", "delete"]),
        action=st.sampled_from(["restore", "publish", "admit", "rewrite"]),
        pick=st.sampled_from([0, 0, 1, 2]),
    )
    def sweep(self, point: str, action: str, pick: int) -> None:
        # Slip in on an existing row, oldest first: the rows about to be deleted are where races bite.
        present = sorted(self.rows.keys(STAGING), key=lambda r: (self.last_held_ms.get(r, 0), r)) or KEYS
        k = present[pick % len(present)]
        if point == "delete":
            # Right before the clear only a rewrite can slip in: an admission there is the window no
            # collector over TQ can close (see the module docstring).
            self.rows.before("delete_if_unchanged", lambda: self.slip("rewrite", k))
        elif point == "recheck":  # between the plan and the re-check of the first batch
            self.state.before("recheck", lambda: self.slip(action, k))
        elif point == "list_rows":  # before the tag partition's listing, or the swept one's
            listing = "list_rows" if pick % 2 == 0 else "list_keys"
            self.rows.before(listing, lambda: self.slip(action, k))
        elif point in MOVE_POINTS:  # while the sweep reads its references (every hook before the re-check)
            self.state.before(point, lambda: self.slip(action, k))
        # What the sweep reads (right after a slip before listing) restarts the clock of what it names.
        self.rows.before("list_rows", self.sweep_sees_references)
        before = self.rows.keys(STAGING)
        deletes_before = self.rows.count("delete_if_unchanged")
        Collector(self.config, self.state, self.rows).sweep(dry_run=False)
        self.rows.hooks.clear()
        self.state.hooks.clear()
        self.rows.timeline.raise_errors()  # a slip that failed inside the sweep (which swallows errors)
        self.state.timeline.raise_errors()
        deleted = before - self.rows.keys(STAGING)
        if self.rows.count("delete_if_unchanged") == deletes_before:
            assert not deleted
        for row in deleted:
            assert row not in self.referenced(), f"{row} deleted while referenced"
            held = self.last_held_ms.get(row)
            assert held is not None and self.clock() - held >= GRACE_S * 1000, f"{row} deleted within grace"

    @invariant()
    def out_of_scope_partition_is_never_touched(self) -> None:
        deletes = [partition for method, partition, _ in self.rows.calls if method == "delete_if_unchanged"]
        assert DATA not in deletes

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


TestSweepInterleavings = SweepMachine.TestCase
# max_examples comes from the profile (tests/unit/conftest.py): `ci` by default, `thorough` for 10,000.
TestSweepInterleavings.settings = settings(stateful_step_count=20, deadline=None)
