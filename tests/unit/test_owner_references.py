"""Owner references: a row is referenced while its owner row exists (verl's prompt row `{uid}` owns its
group's trajectories `{uid}_{session_id}_{index}` until the replay buffer samples the group). Config
refusals, the source on the memory store, sweeps, and the verl example's rule and fail-safe."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.testbed.clock import ManualClock
from tq_gc.cli import main
from tq_gc.config import Owner, OwnerReference, ScopeEntry, load_config, parse_config, plan_policy
from tq_gc.errors import ConfigError, ReferenceSourceError
from tq_gc.plan import PlanPolicy
from tq_gc.references.owners import OwnersSource
from tq_gc.report import Outcome, WarningKind
from tq_gc.rows import RowId, Tags, rows_of
from tq_gc.state.memory import MemoryState
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.sweep import Collector
from tq_gc.wiring import Runtime

from support.baseline import with_old_baseline

TRAIN, VAL = "train", "val"
VERL_PATTERN = r"^(?P<uid>[^_]+)_[^_]+_\d+$"
VERL = OwnerReference(partition=TRAIN, key_pattern=VERL_PATTERN, owner=Owner(key="{uid}"))
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verl.yaml"
GRACE_S = 60


def prompt(status: str = "running", step: int = 3) -> dict[str, Any]:
    return {"is_prompt": True, "status": status, "global_steps": step}


def trajectory(step: int = 3) -> dict[str, Any]:
    return {"is_prompt": False, "seq_len": 3, "global_steps": step}


def store_with(rows: dict[str, dict[str, Tags | None]]) -> MemoryRowStore:
    store = MemoryRowStore()
    for partition, tagged in rows.items():
        for key, tags in tagged.items():
            store.put(partition, key, tags)
    return store


def owned(*keys: str, partition: str = TRAIN) -> set[RowId]:
    return {RowId(partition, key) for key in keys}


def read(references: list[OwnerReference], store: MemoryRowStore) -> set[RowId]:
    return rows_of(OwnersSource(references, store).read())


def parse_owner(key_pattern: str = VERL_PATTERN, **owner: Any) -> OwnerReference:
    """The owner rule of a scope entry of TRAIN with `key_pattern` and `owner`."""
    entry = {"partition": TRAIN, "key_pattern": key_pattern, "owner": owner}
    [reference] = parse_config({"scope": [entry]}).owner_references
    return reference


# -- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (
            {"key": "{gid}"},
            r"scope.0: owner.key: '\{gid\}' names 'gid', not a named group .* \(its groups: uid\)",
        ),
        ({}, r"scope.0.owner.key: Field required"),
        ({"key": "prompts"}, "owner.key: 'prompts' uses no group"),
        ({"key": "{uid"}, r"scope.0.owner.key: '\{uid' is not a key template"),
        ({"key": "{uid!r}"}, r"scope.0.owner.key: field \{uid!r\} .* is not a group name"),
        ({"key": "{uid[0]}"}, r"scope.0.owner.key: field \{uid\[0\]\} .* is not a group name"),
        ({"key": "{}"}, r"scope.0.owner.key: field \{\} .* is not a group name"),
        ({"key": "{uid}", "has_tag": ""}, "scope.0.owner.has_tag"),
        ({"key": "{uid}", "owner_tag": "uid"}, "scope.0.owner.owner_tag: unknown key"),
        ({"key": "{uid}", "owner_partition": "prompts"}, "scope.0.owner.owner_partition: unknown key"),
    ],
    ids=[
        "template-names-an-unknown-group",
        "no-template",
        "template-without-group",
        "template-unbalanced",
        "template-conversion",
        "template-index",
        "template-positional",
        "empty-tag",
        "owner-tag-is-gone",
        "owner-partition-is-gone",
    ],
)
def test_config_refuses_a_malformed_owner_naming_the_field(owner: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_owner(**owner)


@pytest.mark.parametrize("way", [{"prefixes": ["u1_"]}, {"all_keys": True}])
def test_an_owner_needs_the_scope_entrys_key_pattern(way: dict[str, Any]) -> None:
    """The owner's key is a template over the key pattern's named groups: an entry of prefixes or of
    all keys has none to fill it."""
    entry = {"partition": TRAIN, **way, "owner": {"key": "{uid}"}}
    with pytest.raises(ConfigError, match=r"scope.0: owner: .*key_pattern"):
        parse_config({"scope": [entry]})


def test_an_owner_reference_is_its_scope_entrys_owner_rule() -> None:
    """One per scope entry with an owner, in scope order; the entry's partition and key pattern are the
    rule's, and its source id is the one owner_references had."""
    pattern = {"key_pattern": VERL_PATTERN}
    config = parse_config(
        {
            "scope": [
                {"partition": "staging", "all_keys": True},
                {"partition": VAL, **pattern, "owner": {"key": "{uid}"}},
                {"partition": TRAIN, **pattern, "owner": {"key": "{uid}", "has_tag": "is_prompt"}},
            ]
        }
    )
    val, train = config.owner_references
    assert (val.partition, val.key_pattern, val.owner.has_tag) == (VAL, VERL_PATTERN, None)
    assert (train.partition, train.key_pattern, train.owner.has_tag) == (TRAIN, VERL_PATTERN, "is_prompt")
    assert train.source_id == f"owner_references:{TRAIN}:{VERL_PATTERN}"
    assert (train.when_empty, train.owner.key) == ("accept", "{uid}")
    assert parse_owner(key="{{p}}/{uid}").owner.key == "{{p}}/{uid}"


def test_an_owner_rule_always_accepts_being_empty() -> None:
    rule = parse_owner(key="{uid}")
    assert rule.may_become_empty and not rule.expect_nonempty


@pytest.mark.parametrize("pattern", [".*", "(x)?", "a*", "|x", "^$", "(?s).*"])
def test_scope_refuses_a_key_pattern_matching_the_empty_string(pattern: str) -> None:
    with pytest.raises(
        ConfigError, match=r"scope.0.key_pattern: .* matches the empty string.*`all_keys: true`"
    ):
        parse_config({"scope": [{"partition": TRAIN, "key_pattern": pattern}]})


@pytest.mark.parametrize(
    "entry",
    [
        {"key_pattern": "[^_]+_.+", "prefixes": ["x"]},
        {"key_pattern": "[^_]+_.+", "all_keys": True},
        {"key_pattern": "(unclosed"},
    ],
)
def test_scope_takes_exactly_one_way_and_a_valid_pattern(entry: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"scope.0"):
        parse_config({"scope": [{"partition": TRAIN, **entry}]})


def test_a_key_pattern_scope_covers_whole_keys_only() -> None:
    entry = ScopeEntry(partition=TRAIN, key_pattern=r"[^_]+_[^_]+_\d+")
    policy = PlanPolicy((entry,), 0, 10, 1.0, 0)
    keys = ["u1_0_0", "u1_3_12", "u1", "u1_0", "u1_0_0x", "xu1_0_0\n", "a_b_c_1"]
    assert policy.scoped_keys(TRAIN, keys) == {"u1_0_0", "u1_3_12"}


# -- the source ------------------------------------------------------------------------------------


def test_is_a_reference_source() -> None:
    source = OwnersSource([VERL], store_with({TRAIN: {"u1": prompt()}}))
    assert source.name == "owners"
    assert OwnersSource([], MemoryRowStore()).read() == {}


def test_verl_trajectories_are_referenced_while_their_prompt_row_exists() -> None:
    store = store_with(
        {
            TRAIN: {
                "u1": prompt("running"),
                "u1_0_0": trajectory(),
                "u1_1_0": trajectory(),
                "u2_0_0": trajectory(),  # its prompt row was cleared: an orphan
                "u3": prompt("pending"),  # a prompt row is never owned by anything
            }
        }
    )
    assert read([VERL], store) == owned("u1_0_0", "u1_1_0")


def test_rows_matching_no_pattern_are_left_to_the_other_rules() -> None:
    store = store_with({TRAIN: {"u1": prompt(), "u1_0_0": trajectory(), "u1/extra": {}, "u1_x_y": {}}})
    summary = OwnersSource([VERL], store).describe()
    assert read([VERL], store) == owned("u1_0_0")
    assert [(s.rows, s.matched, s.owned, s.orphaned) for s in summary] == [(4, 1, 1, 0)]


def test_a_match_leaving_a_template_group_unset_fails_the_source() -> None:
    reference = OwnerReference(
        partition=TRAIN, key_pattern=r"(?P<uid>[^_]+)_\d+(_(?P<sub>\d+))?", owner=Owner(key="{uid}/{sub}")
    )
    store = store_with({TRAIN: {"u1/7": {}, "u1_0_7": {}}})
    assert read([reference], store) == owned("u1_0_7")
    store.put(TRAIN, "u1_0", {})
    with pytest.raises(ReferenceSourceError, match=r"row train/u1_0 matches key_pattern .* leaves a group"):
        read([reference], store)


def test_a_partition_the_store_lacks_names_nothing() -> None:
    """Rows and owners share the rule's partition: one the store lacks holds no row to keep or to delete,
    so the rule names nothing (a typo is said by the sweep's warning and by `tq-gc check`)."""
    store = store_with({"traj": {"u1_0_0": trajectory()}, "trian": {"u1": prompt()}})
    source = OwnersSource([VERL], store)
    assert rows_of(source.read()) == set() and source.counts == {VERL.source_id: 0}
    assert [(s.partition, s.rows, s.matched, s.owned) for s in source.describe()] == [(TRAIN, 0, 0, 0)]


def test_a_partition_written_after_the_store_named_its_partitions_is_read_from_the_listing() -> None:
    """A sweep asks which partitions exist before it lists them: one the job writes in between (verl's
    val at its first validation) is in the listing, and its owner rows keep their rows."""
    val_rule = OwnerReference(partition=VAL, key_pattern=VERL_PATTERN, owner=Owner(key="{uid}"))
    store = store_with({TRAIN: {"u1": prompt(), "u1_0_0": trajectory()}})
    listed = {
        TRAIN: store.list_rows(TRAIN),
        VAL: {"v1": prompt(), "v1_0_0": trajectory(), "v2_0_0": trajectory()},
    }
    source = OwnersSource([VERL, val_rule], store)
    assert rows_of(source.read(listed, existing=[TRAIN])) == owned("u1_0_0") | owned("v1_0_0", partition=VAL)
    assert [(s.partition, s.rows, s.owned) for s in source.describe(listed, [TRAIN])] == [
        (TRAIN, 2, 1),
        (VAL, 3, 1),
    ]


def test_a_store_failure_fails_the_source() -> None:
    class Broken(MemoryRowStore):
        def list_rows(self, partition: str) -> dict[str, Tags]:
            raise ConnectionResetError("controller actor died")

    store = Broken()
    store.put(TRAIN, "u1", prompt())
    with pytest.raises(ReferenceSourceError, match="listing partition 'train' failed: ConnectionResetError"):
        read([VERL], store)


def test_the_listing_passed_in_is_used_instead_of_the_store() -> None:
    store = store_with({TRAIN: {"u1_0_0": trajectory()}})
    listed = {TRAIN: {"u1": prompt(), "u1_0_0": trajectory()}}
    assert rows_of(OwnersSource([VERL], store).read(listed, existing=[TRAIN])) == owned("u1_0_0")
    assert OwnersSource([VERL], store).partitions == [TRAIN]


# -- in a sweep ------------------------------------------------------------------------------------


class Verl:
    """verl's train and val partitions on the memory store, and tq-gc scoped to their trajectories."""

    def __init__(self, **extra: Any) -> None:
        self.clock = ManualClock()
        self.state = with_old_baseline(MemoryState("verl", clock_ms=self.clock))
        self.rows = MemoryRowStore()
        owned_trajectories = {"key_pattern": VERL_PATTERN, "owner": {"key": "{uid}"}}
        self.config = parse_config(
            {
                "namespace": "verl",
                "scope": [{"partition": p, **owned_trajectories} for p in (TRAIN, VAL)],
                "grace_seconds": GRACE_S,
                "schedule": {"interval_seconds": GRACE_S / 2},  # sweeps twice per grace
                "limits": {"max_delete_fraction": 1.0},
                **extra,
            }
        )

    def group(self, partition: str, uid: str, sessions: int = 2) -> list[str]:
        keys = [f"{uid}_{session}_0" for session in range(sessions)]
        for key in keys:
            self.rows.put(partition, key, trajectory())
        self.rows.put(partition, uid, prompt())
        return keys

    def sweep(self, execute: bool = True) -> Any:
        return Collector(self.config, self.state, self.rows, holder="test").sweep(dry_run=not execute)

    def observe_past_grace(self) -> None:
        for _ in range(2):
            self.clock.advance(GRACE_S * 0.55)
            self.sweep(execute=False)


def test_trajectories_of_a_cleared_group_are_reclaimed_after_grace_live_groups_kept() -> None:
    verl = Verl()
    live = verl.group(TRAIN, "u1")
    cleared = verl.group(TRAIN, "u2")
    validating = verl.group(VAL, "v1")
    verl.rows.put(TRAIN, "u3", prompt("pending"))  # a prompt row with no trajectories yet
    verl.rows.delete(TRAIN, ["u2"])  # the owner row is gone, nothing else holds its rows
    first = verl.sweep()
    assert first.outcome is Outcome.COMPLETED
    assert (first.counts.in_scope, first.counts.referenced["owners"], first.counts.within_grace) == (6, 4, 2)
    verl.observe_past_grace()
    report = verl.sweep()
    assert report.counts.deleted == 2 and {row.key for row in report.deleted_sample} == set(cleared)
    assert verl.rows.keys(TRAIN) == {"u1", "u3", *live}
    assert verl.rows.keys(VAL) == {"v1", *validating}


def test_a_prompt_row_written_after_its_trajectories_keeps_them() -> None:
    verl = Verl()
    early = [f"u1_{session}_0" for session in range(2)]
    for key in early:
        verl.rows.put(TRAIN, key, trajectory())
    verl.rows.put(VAL, "v0", prompt())
    assert verl.sweep().counts.within_grace == 2  # unowned for now: their grace runs
    verl.clock.advance(GRACE_S * 0.55)
    verl.sweep(execute=False)
    verl.rows.put(TRAIN, "u1", prompt())  # verl publishes the group's status after its trajectories
    verl.clock.advance(GRACE_S * 0.55)
    report = verl.sweep()
    assert (report.counts.deleted, report.counts.referenced["owners"]) == (0, 2)
    verl.observe_past_grace()
    assert verl.sweep().counts.deleted == 0
    assert verl.rows.keys(TRAIN) == {"u1", *early}


def test_prompt_rows_are_never_in_scope_even_without_trajectories() -> None:
    verl = Verl()
    for uid in ("u1", "u2", "u3"):
        verl.rows.put(TRAIN, uid, prompt("failure"))
    verl.rows.put(VAL, "v1", prompt("finished"))
    verl.sweep()
    verl.observe_past_grace()
    report = verl.sweep()
    assert (report.counts.listed, report.counts.in_scope, report.counts.deleted) == (4, 0, 0)
    assert verl.rows.keys(TRAIN) == {"u1", "u2", "u3"}


def test_a_missing_owner_partition_is_swept_as_empty_with_a_warning() -> None:
    """verl's val before its first validation: train is swept as always (owned rows kept, a cleared
    group's reclaimed after grace), and each sweep warns that val does not exist yet."""
    verl = Verl()
    kept = verl.group(TRAIN, "u1")
    cleared = verl.group(TRAIN, "u2")
    verl.rows.delete(TRAIN, ["u2"])  # val not written yet
    report = verl.sweep()
    assert report.outcome is Outcome.COMPLETED, report.reason
    [warning] = report.warnings
    assert warning.kind is WarningKind.SCOPE_PARTITION_MISSING and "'val'" in warning.message
    assert "did you mean" not in warning.message
    verl.observe_past_grace()
    report = verl.sweep()
    assert report.outcome is Outcome.COMPLETED, report.reason
    assert {row.key for row in report.deleted_sample} == set(cleared)
    assert verl.rows.keys(TRAIN) == {"u1", *kept} and VAL not in verl.rows.partitions()


def test_check_reports_rows_matched_and_owners(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verl = Verl()
    verl.group(TRAIN, "u1")
    verl.group(TRAIN, "u2")
    verl.rows.delete(TRAIN, ["u2"])
    config = tmp_path / "gc.yaml"
    config.write_text(yaml.safe_dump(verl.config.model_dump(mode="json")))

    def check() -> tuple[int, dict[str, Any]]:
        code = main(["check", "--config", str(config), "--json"], Runtime(verl.state, verl.rows))
        return code, {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}

    code, checks = check()  # the job has not written val yet: no row to keep or delete there
    assert code == 2 and checks["owner reference val"]["ok"] and checks["scope partition val"]["ok"]
    assert checks["owner reference val"]["detail"] == (
        "val not created yet: names nothing until the job writes it (its rows would be there too)"
    )
    assert not checks["verl in-flight protection"]["ok"]
    assert "NOT fail-safe" in checks["verl in-flight protection"]["detail"]
    verl.rows.put(VAL, "v1", prompt())
    verl.state.admit("verl/run-1/trainer", {}, ttl_ms=600_000)
    verl.state.admit("verl/run-1/step/1", {TRAIN: ["u1_0_0", "u1_1_0"]}, ttl_ms=600_000)
    code, checks = check()
    assert code == 0
    assert checks["verl in-flight protection"]["detail"] == (
        "active: trainer integration live (verl/run-1/trainer), 2 rows of its batches held"
    )
    assert checks["owner reference train"] == {
        "name": "owner reference train",
        "ok": True,
        "detail": (
            "5 rows in train, 4 with an owner key: 2 owner present (kept), 2 owner absent (unreferenced)"
        ),
    }
    assert checks["owner reference val"]["detail"].startswith("1 rows in val, 0 with an owner key")


def test_the_verl_example_scopes_trajectories_and_padding_never_prompt_rows() -> None:
    config = load_config(EXAMPLE, env={})
    uid, pad = str(uuid.uuid4()), f"pad{uuid.uuid4().hex}"  # verl's uid and padding uid
    trajectories = [f"{uid}_0_0", f"{uid}_7_12", f"{pad}_0_0", f"{pad}_3_0"]
    keys = [uid, *trajectories, f"{uid}_0", uuid.uuid4().hex + "_0_0", "pad_0_0", f"{uid}_x_0"]
    policy = plan_policy(config)
    for partition in (TRAIN, VAL):
        assert policy.scoped_keys(partition, keys) == set(trajectories)
    store = store_with(
        {
            TRAIN: {uid: prompt(), f"{uid}_0_0": trajectory(), f"{pad}_0_0": {"is_padding": True}},
            VAL: {str(uuid.uuid4()): prompt()},
        }
    )
    assert read(list(config.owner_references), store) == owned(f"{uid}_0_0")


def test_an_owner_without_the_required_tag_owns_nothing() -> None:
    """verl: a status put (kv_put creates a missing key) after a group's prompt row was cleared brings the
    key `{uid}` back as a row tagged only {status}: not a prompt row, so it must not pin the group."""
    reference = OwnerReference(TRAIN, VERL_PATTERN, Owner(key="{uid}", has_tag="is_prompt"))
    store = store_with(
        {
            TRAIN: {
                "u1": prompt(),
                "u1_0_0": trajectory(),
                "u2": {"status": "finished"},  # recreated by a status put
                "u2_0_0": trajectory(),
                "u3": None,  # a row without tags
                "u3_0_0": trajectory(),
            }
        }
    )
    assert read([reference], store) == owned("u1_0_0")
    assert read([VERL], store) == owned("u1_0_0", "u2_0_0", "u3_0_0")  # without it, any row owns


def test_the_verl_example_aborts_every_sweep_while_no_trainer_integration_is_live() -> None:
    """The fail-safe: a sampled batch has no prompt row, so without the integration's admissions an
    owner rule alone would delete it mid-step. The example makes sweeps abort instead."""
    clock = ManualClock()
    state = MemoryState("verl-job", clock_ms=clock)
    uid = str(uuid.uuid4())
    rows = store_with({TRAIN: {f"{uid}_0_0": trajectory()}, VAL: {str(uuid.uuid4()): prompt()}})  # in use
    config = load_config(EXAMPLE, env={})
    for _ in range(3):
        report = Collector(config, state, rows, holder="test").sweep(dry_run=False)
        assert (report.outcome, report.cause) == (Outcome.ABORTED, "source_failed")
        assert "expect_nonempty" in (report.reason or "")
        clock.advance(config.grace_seconds)
    assert rows.keys(TRAIN) == {f"{uid}_0_0"}
    state.admit("verl/run-1/trainer", {}, ttl_ms=600_000)  # the integration's presence admission
    assert Collector(config, state, rows, holder="test").sweep(dry_run=False).outcome is Outcome.COMPLETED


def test_with_the_shipped_verl_config_sweeps_go_on_when_every_owner_row_is_gone() -> None:
    """verl clears every sampled group's prompt row at once and the validation partition's after each
    validation: owners reading as none after some is verl's normal life, not a misread source. With the
    example config such a sweep completes (the batch in flight is the integration's admissions' to
    hold), so the leak each resume restores is still reclaimed."""
    values = yaml.safe_load(EXAMPLE.read_text())
    values.update(grace_seconds=GRACE_S, limits={"max_delete_fraction": 1.0})
    values.update(schedule={"interval_seconds": GRACE_S / 2})  # sweeps twice per grace
    config = parse_config(values)
    clock = ManualClock()
    state, rows = MemoryState("verl", clock_ms=clock), MemoryRowStore()
    state.admit("verl/run/trainer", {}, ttl_ms=10**9)  # the integration's presence
    uid = "0123abcd-0000-4000-8000-00000000beef"
    for partition in (TRAIN, VAL):
        rows.put(partition, uid, prompt())
        rows.put(partition, f"{uid}_0_0", trajectory())
    assert Collector(config, state, rows).sweep(dry_run=False).outcome is Outcome.COMPLETED
    for partition in (TRAIN, VAL):
        rows.delete(partition, [uid])  # sampled (train), validated (val): no owner row left anywhere
    clock.advance(1)
    report = Collector(config, state, rows).sweep(dry_run=False)
    assert report.outcome is Outcome.COMPLETED, report.reason
