"""Property test of owner rules over partitions the row store may not have.

A hypothesis state machine plays verl's job on three scope entries, each with the owner rule of verl's
example: `train`, written from any step on; `val`, absent until the job first writes it, maybe in the
middle of a sweep (before it asks the store's partitions, between that and its listing, right before a
delete); and `trian`, a typo no row is ever written to. Groups are written, sampled (the prompt row goes),
finalized, and their prompt rows recreated tag-only by a status put, while time passes and sweeps run.

Invariants: no sweep aborts (an absent partition holds no row to keep or to delete); a row the sweep
deletes was unowned (no owner row tagged is_prompt) for at least the grace period as far as sweeps can see
it (not written, and listed without its owner, during the last grace), and has no owner row when the sweep
ends unless one was written after the listing, right before the delete (the window no collector over TQ
closes); each sweep warns of the typo, naming `train` once it exists.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from tools.testbed.clock import ManualClock
from tq_gc.config import parse_config
from tq_gc.report import Outcome, WarningKind
from tq_gc.rows import Tags
from tq_gc.sweep import Collector

from support.scripted_store import ScriptedRowStore, ScriptedState

TRAIN, VAL, TYPO = "train", "val", "trian"
WRITTEN = [TRAIN, VAL]  # the typo is never written
UIDS = ["u0", "u1", "u2"]
GRACE_S = 60
PROMPT: Tags = {"is_prompt": True, "status": "running"}
# Where a sweep may find the job writing val: before it asks which partitions exist, between that and its
# listing, right before its first delete.
SLIP_POINTS = ["none", "none", "none", "partitions", "list_rows", "delete_if_unchanged"]
partition = st.sampled_from(WRITTEN)
uid = st.sampled_from(UIDS)


def owner_of(key: str) -> str | None:
    """The uid of a trajectory `{uid}_{session}`, None for any other key (the entries' pattern)."""
    uid, sep, session = key.partition("_")
    return uid if sep and session.isdigit() else None


class OwnerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.state = ScriptedState("owners", clock_ms=self.clock)
        self.rows = ScriptedRowStore()
        rule_of_verl = {
            "key_pattern": r"^(?P<uid>[^_]+)_\d+$",
            "owner": {"key": "{uid}", "has_tag": "is_prompt"},
        }
        self.config = parse_config(
            {
                "scope": [{"partition": p, **rule_of_verl} for p in (TRAIN, VAL, TYPO)],
                "grace_seconds": GRACE_S,
                "limits": {"max_delete_fraction": 1.0},
            }
        )
        self.last_held_ms: dict[tuple[str, str], int] = {}  # row -> last time written or listed owned
        self.rows.spies.append(self.saw_listing)

    # -- the oracle -----------------------------------------------------------------------------

    def owned(self, key: str, rows: dict[str, Tags]) -> bool:
        owner = owner_of(key)
        return owner is not None and bool((rows.get(owner) or {}).get("is_prompt"))

    def saw_listing(self, method: str, args: tuple[Any, ...], _kwargs: dict[str, Any], result: Any) -> None:
        """A listing the sweep read: each trajectory listed beside its owner was seen held."""
        if method != "list_rows":
            return
        listed_partition: str = args[0]
        for key in result:
            if self.owned(key, result):
                self.last_held_ms[(listed_partition, key)] = self.clock()

    # -- what verl's job does -------------------------------------------------------------------

    def not_validated_yet(self, p: str) -> bool:
        """val is written first by a validation (`validate`, or one slipped into a sweep)."""
        return p == VAL and VAL not in self.rows.partitions()

    @rule(u=uid)
    def validate(self, u: str) -> None:
        self.write_group(VAL, u, 1, validating=True)

    @rule(p=partition, u=uid, sessions=st.sampled_from([1, 2]))
    def write_group(self, p: str, u: str, sessions: int, validating: bool = False) -> None:
        if self.not_validated_yet(p) and not validating:
            return
        self.rows.put(p, u, PROMPT)
        for session in range(sessions):
            self.write_trajectory(p, u, session)

    @rule(p=partition, u=uid, session=st.sampled_from([0, 1]))
    def write_trajectory(self, p: str, u: str, session: int) -> None:
        """Also a straggler of a group already sampled, or one whose prompt row is not written yet."""
        if self.not_validated_yet(p):
            return
        key = f"{u}_{session}"
        self.rows.put(p, key, {"is_prompt": False})
        self.last_held_ms[(p, key)] = self.clock()

    @rule(p=partition, u=uid)
    def sample(self, p: str, u: str) -> None:
        """The replay buffer samples the group: its prompt row goes at once."""
        self.rows.delete(p, [u])

    @rule(p=partition, u=uid)
    def status_put(self, p: str, u: str) -> None:
        """A status put after sampling recreates the key `{uid}` tag-only: no prompt row, it owns nothing."""
        if not self.not_validated_yet(p) and u not in self.rows.keys(p):
            self.rows.put(p, u, {"status": "finished"})

    @rule(p=partition, u=uid)
    def finalize(self, p: str, u: str) -> None:
        self.rows.delete(p, [key for key in self.rows.keys(p) if owner_of(key) == u])

    @rule(seconds=st.sampled_from([30, 59, 59, 61, 200]))
    def time_passes(self, seconds: int) -> None:
        self.sweep("none", UIDS[0])
        self.clock.advance(seconds)

    # -- the sweep, with val written in the middle of it ----------------------------------------

    @rule(point=st.sampled_from(SLIP_POINTS), u=uid)
    def sweep(self, point: str, u: str) -> None:
        if point != "none":
            self.rows.before(point, lambda: self.validate(u))
        before = {p: self.rows.keys(p) for p in WRITTEN}
        had = set(self.rows.partitions())
        report = Collector(self.config, self.state, self.rows, holder="test").sweep(dry_run=False)
        self.rows.hooks.clear()
        self.rows.timeline.raise_errors()
        assert report.outcome is Outcome.COMPLETED, report.reason
        # An owner row written after the listing, right before the delete, is the window no collector
        # over TQ closes (no compare-and-delete across rows: tests/unit/test_sweep_properties.py).
        listed_the_slip = point != "delete_if_unchanged"
        for p in WRITTEN:
            listing = self.rows.list_rows(p)
            for key in before[p] - self.rows.keys(p):
                owned = self.owned(key, listing)
                assert not (owned and listed_the_slip), f"{p}/{key} deleted while its owner row exists"
                held = self.last_held_ms.get((p, key))
                assert held is not None and self.clock() - held >= GRACE_S * 1000, f"{p}/{key} within grace"
        deleted = sum(len(before[p] - self.rows.keys(p)) for p in WRITTEN)
        event(
            "sweep: "
            + ("deleted rows" if deleted else "deleted nothing")
            + f", val {'present' if VAL in had else 'absent'} before it"
        )
        missing = [w.message for w in report.warnings if w.kind is WarningKind.SCOPE_PARTITION_MISSING]
        [typo] = [message for message in missing if f"{TYPO!r}" in message]
        assert ("did you mean 'train'?" in typo) == (TRAIN in had), typo


TestOwnerRules = OwnerMachine.TestCase
# max_examples comes from the profile (tests/unit/conftest.py): `ci` by default, `thorough` for 10,000.
TestOwnerRules.settings = settings(stateful_step_count=30, deadline=None)
