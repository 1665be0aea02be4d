"""A verl partition the stack has not created yet is not a typo: deploy/examples/verl.yaml marks `val`
`created_by_stack`, so a job resumed from a checkpoint taken before its first validation
(`trainer.val_before_train=False`) sweeps `train` while `val` does not exist, and the owner rule of that
scope entry names nothing meanwhile. A misspelled partition with an owner rule still fails closed."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from tq_gc.config import Config, parse_config
from tq_gc.integrations.verl import BatchHolder
from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import Outcome
from tq_gc.state.memory import MemoryState
from tq_gc.stores import MemoryRowStore
from tq_gc.sweep import Collector

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verl.yaml"


def example(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    values.update(changes)
    return values


def trajectory() -> str:
    return f"{uuid.uuid4()}_0_0"


def sweep_with(config: Config, store: MemoryRowStore) -> Any:
    state = MemoryState("verl-job")
    holder = BatchHolder(GcClient(AdmissionRegistry(state)), run_id="resumed")  # the integration is live
    try:
        return Collector(config, state, store, holder="test").sweep(dry_run=True)
    finally:
        holder.close()


def test_the_shipped_config_sweeps_train_before_val_exists() -> None:
    store = MemoryRowStore()
    store.put("train", trajectory())  # the restored batch; no `val` partition: no validation yet
    report = sweep_with(parse_config(example()), store)
    assert report.outcome is Outcome.DRY_RUN, report.reason
    assert report.counts.in_scope == 1


def test_a_misspelled_partition_with_an_owner_rule_still_aborts() -> None:
    values = example()
    values["scope"][0]["partition"] = "trian"  # train's entry: not created_by_stack
    store = MemoryRowStore()
    store.put("train", trajectory())
    store.put("val", trajectory())
    report = sweep_with(parse_config(values), store)
    assert report.outcome is Outcome.ABORTED and "'trian'" in (report.reason or "")


def test_the_created_by_stack_entry_says_it_for_its_owner_rule_too() -> None:
    config = parse_config(example())
    assert [(rule.partition, rule.created_by_stack) for rule in config.owner_references] == [
        ("train", False),
        ("val", True),
    ]
