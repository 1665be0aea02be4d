"""Ledger schema 3's branch layout (attempts `{attempt_id, gate_rollout_id, ...}`, at
amahishi/partial-rollout-ledger-integration-b2a048c9a): NeMo's loader derives each attempt's gate id from
its group, generation and attempt id, and refuses a sealed or finalized receipt naming another rollout.
The reader refuses the same, and the oracle of NeMo's restore agrees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tq_gc.errors import ReferenceSourceError
from tq_gc.rows import RowId

from support.nemo_rl_checkpoints import write_point
from support.nemo_rl_data_plane import STAGING
from support.nemo_rl_ledgers import attempt_v3, group_v3, ledger_v3
from support.nemo_rl_oracle import RestoreRefused, restore_keeps
from support.nemo_rl_reading import read


def branch_ledger(status: str = "sealed", **attempt_fields: Any) -> dict[str, Any]:
    """One group `g1`, one sibling, one attempt `x1` keeping `s/1`, as the branch's loader reads it."""
    attempt = {
        "attempt_id": "x1",
        "gate_rollout_id": "g1_g0_ax1",
        "status": status,
        "receipt": {"rollout_id": "g1_g0_ax1", "manifest": [{"staging_key": "s/1"}]},
        "reward": 1.0,
        "staging_keys": ["s/1"],
        **attempt_fields,
    }
    sibling = {"generation_index": 0, "logical_rollout_id": "g1_g0", "attempts": [attempt]}
    group = {"group_id": "g1", "prompt_id": "p1", "expected_generations": 1, "siblings": [sibling]}
    return {"schema_version": 3, "staging_partition": STAGING, "groups": [group]}


def test_a_sealed_attempt_of_the_branch_layout_keeps_its_rows(ckpt: Path) -> None:
    write_point(ckpt / "step_3", branch_ledger())
    assert read(ckpt) == {RowId(STAGING, "s/1")}
    assert restore_keeps(ckpt) == {"s/1"}


@pytest.mark.parametrize("status", ["sealed", "finalized"])
@pytest.mark.parametrize(
    "fields",
    [
        {"receipt": {"rollout_id": "g1_g0_ax0", "manifest": [{"staging_key": "s/1"}]}},
        {
            "gate_rollout_id": "g1_g0_x1",
            "receipt": {"rollout_id": "g1_g0_x1", "manifest": [{"staging_key": "s/1"}]},
        },
        {
            "attempt_id": "",
            "gate_rollout_id": "g1_g0_a",
            "receipt": {"rollout_id": "g1_g0_a", "manifest": []},
        },
    ],
    ids=["another-attempts-receipt", "gate-id-not-derived", "no-attempt-id"],
)
def test_a_receipt_that_is_not_its_attempts_fails_closed(
    ckpt: Path, status: str, fields: dict[str, Any]
) -> None:
    write_point(ckpt / "step_3", branch_ledger(status, **fields))
    with pytest.raises(ReferenceSourceError, match=r"NeMo RL's restore refuses it"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)


# -- the main-line layout (attempts `{attempt_index, ...}`; rollout_recovery.py schema 3, code index) ----


def main_line_ledger(receipt_ids: list[str], indices: list[int] | None = None) -> dict[str, Any]:
    """One group `g1`, one sibling whose attempts are failed but the last, sealed keeping `s/1`."""
    attempts = [attempt_v3(index, "failed") for index in (indices or list(range(len(receipt_ids))))[:-1]]
    last = (indices or list(range(len(receipt_ids))))[-1]
    attempts.append(attempt_v3(last, "sealed", ["s/1"], rollout_id=receipt_ids[-1]))
    return ledger_v3([group_v3("g1", [attempts])])


@pytest.mark.parametrize(
    "receipt_ids", [["g1_g0"], ["x", "g1_g0-a1"]], ids=["first-attempt", "second-attempt"]
)
def test_a_main_line_sealed_receipt_naming_its_gym_capture_key_keeps_its_rows(
    ckpt: Path, receipt_ids: list[str]
) -> None:
    write_point(ckpt / "step_3", main_line_ledger(receipt_ids))
    assert read(ckpt) == {RowId(STAGING, "s/1")}
    assert restore_keeps(ckpt) == {"s/1"}


@pytest.mark.parametrize(
    ("receipt_ids", "indices"),
    [(["g1_g0-a0"], None), (["x", "g1_g0"], None), (["x", "g1_g0-a2"], [0, 2]), (["g1_g1"], None)],
    ids=["first-attempt-suffixed", "second-attempt-unsuffixed", "indices-not-contiguous", "another-sibling"],
)
def test_a_main_line_receipt_that_is_not_its_attempts_fails_closed(
    ckpt: Path, receipt_ids: list[str], indices: list[int] | None
) -> None:
    write_point(ckpt / "step_3", main_line_ledger(receipt_ids, indices))
    with pytest.raises(ReferenceSourceError, match=r"NeMo RL's restore refuses it"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)


def test_an_attempt_id_used_twice_in_the_branch_layout_fails_closed(ckpt: Path) -> None:
    ledger = branch_ledger()
    twin = {**ledger["groups"][0], "group_id": "g2"}  # g2's attempt reuses g1's attempt_id `x1`
    attempt = {**twin["siblings"][0]["attempts"][0], "gate_rollout_id": "g2_g0_ax1"}
    attempt["receipt"] = {**attempt["receipt"], "rollout_id": "g2_g0_ax1"}
    twin["siblings"] = [{**twin["siblings"][0], "logical_rollout_id": "g2_g0", "attempts": [attempt]}]
    ledger["groups"].append(twin)
    write_point(ckpt / "step_3", ledger)
    with pytest.raises(ReferenceSourceError, match=r"attempt_id 'x1' twice"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)
