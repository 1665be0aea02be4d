"""Each error class carries how a sweep that meets it ends (errors.py): its outcome, its cause, its
message as the report's reason; and a sweep ends exactly so, whichever of its steps raised it."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from tq_gc import errors
from tq_gc.errors import (
    BarrierLost,
    BaselineRebuilding,
    BlastRadiusExceeded,
    CheckpointInProgress,
    ConfigError,
    FenceEpochMoved,
    FenceRaised,
    FenceUp,
    Interrupted,
    LeaseHeld,
    LeaseLost,
    ReferenceSourceError,
    RowStoreNotFound,
    StoreInterrupted,
    StoreRefused,
    StoreUnavailable,
    SweeperPaused,
    TqClaimed,
    TqGcError,
    TransferQueueNotFound,
)
from tq_gc.report import Cause, Outcome

from support.world import World

SKIPPED, ABORTED = Outcome.SKIPPED, Outcome.ABORTED

# (error, outcome, cause, reason): the reasons a sweep reported before each class carried its outcome.
ENDINGS: list[tuple[TqGcError, Outcome, Cause, str]] = [
    (ConfigError("limits.delete_batch: must be 1 or more"), ABORTED, Cause.ERROR, "limits.delete_batch"),
    (TransferQueueNotFound("ray://head:10001"), ABORTED, Cause.ERROR, "no TransferQueueController"),
    (RowStoreNotFound("no row store yet"), ABORTED, Cause.ERROR, "no row store yet"),
    (StoreUnavailable("redis: connection refused"), ABORTED, Cause.STORE_FAILED, "redis: connection refused"),
    (
        StoreRefused("redis: NOPERM", "grant the ACL user scripting"),
        ABORTED,
        Cause.STORE_FAILED,
        "redis: NOPERM. Fix: grant the ACL user scripting",
    ),
    (ReferenceSourceError("tags", "no partition"), ABORTED, Cause.SOURCE_FAILED, "reference source 'tags'"),
    (CheckpointInProgress("ckpt/**", ["ckpt/7"]), SKIPPED, Cause.CHECKPOINT_IN_PROGRESS, "checkpoint being"),
    (
        BaselineRebuilding(["manifests:/ckpt/**"], 12.0, 900.0),
        SKIPPED,
        Cause.BASELINE_REBUILDING,
        "reference source(s) 'manifests:/ckpt/**' read as empty",
    ),
    (LeaseHeld("cron-1:42"), SKIPPED, Cause.LEASE_HELD, "lease held by cron-1:42"),
    (TqClaimed("TransferQueue claimed by sidecar:a"), SKIPPED, Cause.TQ_CLAIMED, "TransferQueue claimed by"),
    (LeaseLost("job-42"), ABORTED, Cause.LEASE_LOST, "the sweep lease of namespace 'job-42' expired"),
    (
        SweeperPaused(31.25),
        ABORTED,
        Cause.LEASE_LOST,
        "31.2 s passed between the lease renewal and the clear (the sweeper was paused?); stopped before "
        "clearing, the lease may already be someone else's",
    ),
    (
        StoreInterrupted("a lease renewal failed: refused"),
        ABORTED,
        Cause.LEASE_LOST,
        "the state store was interrupted mid-sweep (a lease renewal failed: refused)",
    ),
    (
        BarrierLost("job-42"),
        ABORTED,
        Cause.STORE_FAILED,
        "the write barrier of namespace 'job-42' is missing or was shortened mid-sweep",
    ),
    (FenceUp({"ckpt-9": 1, "ckpt-7": 2}), SKIPPED, Cause.FENCE_UP, "checkpoint fence up: ckpt-7, ckpt-9"),
    (FenceRaised("job-42"), SKIPPED, Cause.FENCE_RAISED, "a checkpoint fence of namespace 'job-42' is up"),
    (
        FenceEpochMoved(),
        SKIPPED,
        Cause.FENCE_RAISED,
        "a checkpoint fence was raised since this sweep read its references (it may have written a "
        "manifest this sweep did not read); the next sweep starts afresh",
    ),
    (BlastRadiusExceeded("blast radius: 9 of 10 rows"), ABORTED, Cause.BLAST_RADIUS, "blast radius: 9 of 10"),
    (
        Interrupted("asked to stop (the sidecar shutting down?)"),
        ABORTED,
        Cause.STOPPED,
        "asked to stop (the sidecar shutting down?)",
    ),
]
IDS = [type(error).__name__ for error, *_ in ENDINGS]


@pytest.mark.parametrize(("error", "outcome", "cause", "reason"), ENDINGS, ids=IDS)
def test_each_error_carries_its_outcome_cause_and_reason(
    error: TqGcError, outcome: Outcome, cause: Cause, reason: str
) -> None:
    assert (error.outcome, error.cause) == (outcome, cause)
    assert str(error).startswith(reason)
    assert error.reaches_caller is isinstance(error, ConfigError)


def test_every_error_class_has_its_ending_in_the_table_and_its_branch_in_the_tree() -> None:
    classes = {cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, TqGcError)}
    assert {type(error) for error, *_ in ENDINGS} == classes - {TqGcError}
    tree = (errors.__doc__ or "").split("\n\n")[1]
    assert all(f"── {cls.__name__} " in tree for cls in classes - {TqGcError})


@pytest.mark.parametrize(("error", "outcome", "cause", "reason"), ENDINGS, ids=IDS)
def test_a_sweep_that_meets_an_error_ends_as_the_error_says_and_records_it(
    tmp_path: Path, error: TqGcError, outcome: Outcome, cause: Cause, reason: str
) -> None:
    world = World(tmp_path)

    def fail(partition: str) -> dict[str, Any]:
        raise error

    world.rows.list_keys = fail  # type: ignore[method-assign]
    if isinstance(error, ConfigError):  # the caller must fix it: raised on, once the run is recorded
        with pytest.raises(type(error)):
            world.sweep()
        [recorded] = world.state.recent_runs(1)
    else:
        report = world.sweep()
        assert (report.outcome, report.cause, report.reason) == (outcome, cause, str(error))
        [recorded] = world.state.recent_runs(1)
        assert recorded["run_id"] == report.run_id
    assert (recorded["outcome"], recorded["cause"], recorded["reason"]) == (outcome, cause, str(error))
    assert world.state.lease_holder() is None, "the lease is given back"
