"""A scope partition the row store does not have is swept as empty, owner rule or not: a job resumed from
a checkpoint taken before its first validation (`trainer.val_before_train=False`) sweeps `train` while
verl's `val` does not exist, the owner rule of that entry naming nothing meanwhile (its rows and owners
would be in `val`: there is none to keep or to delete). Each sweep warns of it, and a name close to an
existing partition's is said to be a likely typo."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tq_gc.config import Config, parse_config
from tq_gc.integrations.verl import BatchHolder
from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import Outcome, WarningKind, meant_partition, missing_partition
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


def test_a_misspelled_partition_with_an_owner_rule_is_swept_as_empty_and_said() -> None:
    values = example()
    values["scope"][0]["partition"] = "trian"  # train's entry
    store = MemoryRowStore()
    kept = trajectory()
    store.put("train", kept)
    store.put("val", trajectory())
    report = sweep_with(parse_config(values), store)
    assert report.outcome is Outcome.DRY_RUN, report.reason
    [warning] = report.warnings
    assert warning.kind is WarningKind.SCOPE_PARTITION_MISSING
    assert "'trian'" in warning.message and "did you mean 'train'?" in warning.message
    assert report.counts.deleted == 0 and kept in store.keys("train")


def test_the_shipped_config_warns_that_val_is_not_written_yet() -> None:
    store = MemoryRowStore()
    store.put("train", trajectory())
    [warning] = sweep_with(parse_config(example()), store).warnings
    assert warning.kind is WarningKind.SCOPE_PARTITION_MISSING and "'val'" in warning.message
    assert "did you mean" not in warning.message


@pytest.mark.parametrize(
    ("partition", "existing", "meant"),
    [
        ("rollout_stagin", ["rollout_staging", "rollout_data"], "rollout_staging"),
        ("staging", ["rollout_staging", "rollout_data"], "rollout_staging"),
        ("trian", ["train"], "train"),
        ("val", ["train", "rollout_data"], None),
        ("val", [], None),
    ],
)
def test_a_missing_partitions_message_says_both_readings_and_a_close_name(
    partition: str, existing: list[str], meant: str | None
) -> None:
    message = missing_partition(partition, existing)
    assert f"{partition!r}" in message and "created_by_stack" not in message
    assert "not written yet" in message and "misspelled" in message and "never swept" in message
    assert meant_partition(partition, existing) == meant
    if meant is None:
        assert "did you mean" not in message
    else:
        assert f"did you mean {meant!r}?" in message
