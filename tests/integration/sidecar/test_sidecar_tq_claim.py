"""Sweepers that do not share one state store never both sweep one TransferQueue: the TQ's claim.

Two memory:// sidecars each hold a lease and a registry of their own; a sidecar and a CLI on another
Redis DB likewise. The second one's sweeps are skipped (cause tq_claimed) with nothing deleted, and
their reason names the first; sweepers of one Redis and namespace go on sharing. A claim ends when its
sidecar stops, when its process dies, and at the end of a CLI run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from harness import keys_in

from tq_gc.cli.commands import EXIT_OK, EXIT_SKIPPED, EXIT_USAGE, main
from tq_gc.config import Config
from tq_gc.wiring import Runtime

from .helpers import GRACE_S, MakeConfig, StartSidecar, call, name_of, wait_until

pytestmark = pytest.mark.ray

MANUAL = {"interval_seconds": 3600}  # sweeps only on sweep_now()


def held_by(handle: Any, partition: str, keys: list[str]) -> None:
    """A publisher of this sidecar's registry holds `keys` (the registry is the sidecar's own state)."""
    call(handle, "admit", "publisher", {partition: keys}, 600_000)


def sweeps_past_grace(handle: Any) -> list[dict[str, Any]]:
    """Three sweeps, the last one more than a grace after the first: an orphan seen by the first is
    deleted by the last."""
    first = call(handle, "sweep_now")
    time.sleep(GRACE_S + 0.5)
    return [first, call(handle, "sweep_now"), call(handle, "sweep_now")]


def test_a_second_memory_sidecar_beside_a_live_one_deletes_nothing_until_that_one_stops(
    make_config: MakeConfig, sidecar: StartSidecar, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ["held/1", "held/2"])
    first_config = make_config(schedule=MANUAL)
    first = sidecar(first_config)
    held_by(first, tq_partition, ["held/1", "held/2"])
    assert call(first, "sweep_now")["outcome"] == "completed"

    second = sidecar(make_config(schedule=MANUAL))  # another job's, or a restart beside the live one
    for report in sweeps_past_grace(second):
        assert (report["outcome"], report["cause"]) == ("skipped", "tq_claimed"), report
        assert report["counts"]["deleted"] == 0
        assert name_of(first) in report["reason"] and "memory://" in report["reason"]
    assert keys_in(tq, tq_partition) == {"held/1", "held/2"}, "the second sidecar deleted held rows"
    assert call(first, "sweep_now")["outcome"] == "completed", "the first goes on sweeping"

    call(first, "shutdown")  # a clean stop releases its claim at once
    assert call(second, "sweep_now")["outcome"] == "completed"


def test_a_crashed_sidecars_claim_ends_with_its_process(
    make_config: MakeConfig, sidecar: StartSidecar, tq_partition: str
) -> None:
    first = sidecar(make_config(schedule=MANUAL))
    assert call(first, "sweep_now")["outcome"] == "completed"
    second = sidecar(make_config(schedule=MANUAL))
    assert call(second, "sweep_now")["cause"] == "tq_claimed"

    ray.kill(first, no_restart=True)  # no shutdown: the process is gone, and its claim with it
    wait_until(
        "the second sidecar's sweep goes through", lambda: call(second, "sweep_now")["outcome"] == "completed"
    )


def test_one_redis_shares_the_tq_and_another_db_is_refused(
    make_config: MakeConfig,
    sidecar: StartSidecar,
    redis_url: str,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put_rows(tq_partition, ["held/1"])
    shared = make_config(on_db(redis_url, 0), schedule=MANUAL)
    side = sidecar(shared)
    held_by(side, tq_partition, ["held/1"])  # into Redis DB 0, namespace shared.namespace
    assert call(side, "sweep_now")["outcome"] == "completed"

    # A CronJob on the same Redis and namespace sweeps beside it, as before: the lease orders them.
    code, report = cli_sweep(shared, tmp_path / "same.yaml", capsys)
    assert (code, report["outcome"]) == (EXIT_OK, "completed"), report

    # One on DB 1 (same namespace) sees none of DB 0's admissions: refused, exit 3, nothing deleted.
    other_db = shared.model_copy(update={"state_url": on_db(redis_url, 1)})
    time.sleep(GRACE_S + 0.5)
    for _ in range(2):  # the second run would delete what the first saw, if it swept
        code, report = cli_sweep(other_db, tmp_path / "db1.yaml", capsys)
        assert (code, report["outcome"], report["cause"]) == (EXIT_SKIPPED, "skipped", "tq_claimed"), report
        assert name_of(side) in report["reason"] and f"({shared.state_url})" in report["reason"]
        time.sleep(GRACE_S + 0.5)
    assert keys_in(tq, tq_partition) == {"held/1"}


def test_a_cli_run_releases_its_claim_at_its_end(
    make_config: MakeConfig,
    sidecar: StartSidecar,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = cli_sweep(make_config(redis_url), tmp_path / "cli.yaml", capsys)
    assert (code, report["outcome"]) == (EXIT_OK, "completed"), report
    # This pytest process (the CLI's) lives on; its claim must not.
    later = sidecar(make_config(schedule=MANUAL))
    assert call(later, "sweep_now")["outcome"] == "completed"


def test_a_dry_run_beside_another_states_claim_is_skipped_and_takes_nothing(
    make_config: MakeConfig,
    sidecar: StartSidecar,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    side = sidecar(make_config(schedule=MANUAL))
    assert call(side, "sweep_now")["outcome"] == "completed"
    code, report = cli_sweep(make_config(redis_url), tmp_path / "dry.yaml", capsys, execute=False)
    assert (code, report["cause"]) == (EXIT_SKIPPED, "tq_claimed"), report

    call(side, "shutdown")
    code, report = cli_sweep(make_config(redis_url), tmp_path / "dry2.yaml", capsys, execute=False)
    assert (code, report["outcome"]) == (EXIT_OK, "dry_run"), report
    again = sidecar(make_config(schedule=MANUAL))  # the dry run left no claim behind
    assert call(again, "sweep_now")["outcome"] == "completed"


def test_check_names_a_claim_for_another_state(
    make_config: MakeConfig,
    sidecar: StartSidecar,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    side_config = make_config(schedule=MANUAL)
    side = sidecar(side_config)
    assert call(side, "sweep_now")["outcome"] == "completed"

    name = name_of(side)
    code, claim = cli_check(make_config(redis_url), tmp_path / "other.yaml", capsys, name)
    assert code == EXIT_USAGE and claim["ok"] is False, claim
    assert name in claim["detail"] and "tq_claimed" in claim["detail"]
    code, claim = cli_check(side_config, tmp_path / "own.yaml", capsys, name)  # the sidecar's own config
    assert claim["ok"] is True and name in claim["detail"], claim


def cli_check(
    config: Config, path: Path, capsys: pytest.CaptureFixture[str], sidecar_name: str
) -> tuple[int, dict[str, Any]]:
    """`tq-gc check --json` in this process, beside the sidecar `sidecar_name` (a test's own name, where
    users' have the fixed one): its exit code and its claim check."""
    path.write_text(json.dumps(config.model_dump(mode="json")))
    capsys.readouterr()
    code = main(["check", "--config", str(path), "--json"], Runtime(sidecar_name=sidecar_name))
    checks = json.loads(capsys.readouterr().out)["checks"]
    return code, next(c for c in checks if c["name"] == "TransferQueue claim")


def on_db(redis_url: str, db: int) -> str:
    return f"{redis_url.rsplit('/', 1)[0]}/{db}"


def cli_sweep(
    config: Config, path: Path, capsys: pytest.CaptureFixture[str], execute: bool = True
) -> tuple[int, dict[str, Any]]:
    """`tq-gc sweep [--execute] --json` in this process (a CronJob's run), against the job's TQ."""
    path.write_text(json.dumps(config.model_dump(mode="json")))  # YAML reads JSON
    capsys.readouterr()
    code = main(["sweep", "--config", str(path), "--json", *(["--execute"] if execute else [])])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, report
