"""The sidecar on its schedule, on a real Ray cluster and a real TQ: it reclaims orphans once their grace
has passed (memory:// and redis:// state), and runs dry when told to."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
from harness import keys_in

from tq_gc.errors import ConfigError
from tq_gc.state import RedisState
from tq_gc.wiring import DEFAULT_DUTY_CYCLE

from .helpers import GRACE_S, MakeConfig, RecordTiming, StartSidecar, call, reports, wait_until
from .remote_side import duty_noting_tq_store

pytestmark = pytest.mark.ray


@pytest.fixture(params=["memory", "redis"])
def state_url(request: pytest.FixtureRequest) -> str:
    return "memory://" if request.param == "memory" else str(request.getfixturevalue("redis_url"))


def test_the_schedule_reclaims_orphans_once_their_grace_has_passed(
    state_url: str,
    make_config: MakeConfig,
    sidecar: StartSidecar,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    record_timing: RecordTiming,
) -> None:
    put_rows(tq_partition, ["orphan/1", "orphan/2"])
    config = make_config(state_url)
    started = time.monotonic()
    handle = sidecar(config)

    up = time.monotonic()
    wait_until("the orphans are reclaimed", lambda: not keys_in(tq, tq_partition))
    record_timing(f"orphans reclaimed after sidecar up ({state_url[:5]})", time.monotonic() - up)
    # The rows go with the clear; the sweep's report comes once it has confirmed and finished.
    wait_until(
        "the deleting sweep has reported", lambda: any(r["counts"]["deleted"] for r in reports(handle))
    )
    assert time.monotonic() - started >= GRACE_S
    history = reports(handle)
    sweep_ms = [sum(r["phases_ms"].values()) for r in history]
    record_timing(f"one scheduled sweep inside the actor, max ({state_url[:5]})", max(sweep_ms) / 1000)
    assert history[0]["counts"]["within_grace"] == 2  # first sight: kept for the grace
    assert all(r["outcome"] == "completed" and not r["dry_run"] for r in history)
    deleted = [row for r in history for row in r["deleted_sample"]]
    assert sorted(row["key"] for row in deleted) == ["orphan/1", "orphan/2"]
    assert all(row["unreferenced_s"] >= GRACE_S for row in deleted)
    if state_url.startswith("redis"):
        state = RedisState.from_url(state_url, config.namespace)
        try:  # the sidecar kept its records in Redis, where the CLI (`tq-gc audit`) reads them
            assert {row.key for row in state.read_audit(None, 10)} == {"orphan/1", "orphan/2"}
        finally:
            state.close()


def test_a_sidecar_started_dry_run_only_dry_runs(
    make_config: MakeConfig, sidecar: StartSidecar, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ["orphan/1"])
    handle = sidecar(make_config(), dry_run=True)

    eligible = wait_until(
        "a dry run finds the orphan eligible",
        lambda: [r for r in reports(handle) if r["counts"]["eligible"] == 1],
    )

    assert eligible[0]["outcome"] == "dry_run"
    assert all(r["dry_run"] for r in reports(handle))
    assert call(handle, "sweep_now")["dry_run"] is True  # on demand too, by default
    assert "dry run" in call(handle, "status")["schedule"] and call(handle, "status")["execute"] is False
    with pytest.raises(ConfigError, match=r"started dry-run .*dry_run=True.*--dry-run"):
        call(handle, "sweep_now", dry_run=False)
    assert keys_in(tq, tq_partition) == {"orphan/1"}


@pytest.mark.parametrize("duty_cycle", [None, 0.5])
def test_the_sidecar_attaches_at_the_duty_cycle_it_was_started_with(
    make_config: MakeConfig, sidecar: StartSidecar, tmp_path: Path, duty_cycle: float | None
) -> None:
    """How hard it presses on the job's TransferQueue is chosen where it starts (start_sidecar's
    duty_cycle, `tq-gc --duty-cycle F serve`), and reaches the row store it attaches (the default: 0.25)."""
    noted = tmp_path / "duty"
    factory = functools.partial(duty_noting_tq_store, noted=str(noted))
    chosen = {} if duty_cycle is None else {"duty_cycle": duty_cycle}
    handle = sidecar(make_config(schedule={"interval_seconds": 3600}), factory, **chosen)
    assert call(handle, "sweep_now")["outcome"] == "completed"
    expected = DEFAULT_DUTY_CYCLE if duty_cycle is None else duty_cycle
    assert float(noted.read_text()) == expected
    assert call(handle, "status")["duty_cycle"] == expected
