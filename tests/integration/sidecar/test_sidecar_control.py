"""Controlling the sidecar: pause and resume its schedule, start it twice (the second start finds the
running actor), shut it down; and finding a sidecar that is not there."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from tools.testbed.cli import TQ_GC, cli_env
from tq_gc.errors import TqGcError
from tq_gc.sidecar.client import sidecar_registry, start_sidecar, wait_for_warm_up
from tq_gc.sidecar.names import SIDECAR_NAME

from . import remote_side
from .helpers import INTERVAL_S, MakeConfig, StartSidecar, call, reports, wait_until

pytestmark = pytest.mark.ray


def test_pause_stops_the_schedule_and_resume_restarts_it(
    make_config: MakeConfig, sidecar: StartSidecar
) -> None:
    handle = sidecar(make_config())
    wait_until("a first scheduled sweep", lambda: reports(handle))

    call(handle, "pause")
    time.sleep(INTERVAL_S)  # a tick handed to the scheduler's thread just before the pause may still run
    paused = wait_until("no sweep in progress", lambda: idle_status(handle))
    assert paused["paused"] is True and paused["next_run_at"] is None
    last_run = paused["last_reports"][0]["run_id"]
    time.sleep(3 * INTERVAL_S)
    assert reports(handle)[-1]["run_id"] == last_run  # no scheduled sweep while paused
    assert call(handle, "sweep_now")["outcome"] == "completed"  # on demand still works

    call(handle, "resume")
    status = call(handle, "status")
    assert status["paused"] is False and status["next_run_at"] is not None
    on_demand = reports(handle)[-1]["run_id"]
    wait_until("a scheduled sweep after resume", lambda: reports(handle)[-1]["run_id"] != on_demand)


def test_a_sidecar_imports_transfer_queue_when_it_starts_not_at_its_first_sweep(
    make_config: MakeConfig, sidecar: StartSidecar
) -> None:
    """Importing torch and TransferQueue is seconds of CPU: at the sidecar's start it runs beside the
    job's own start-up, at its first sweep beside the job's training steps."""
    handle = sidecar(make_config(schedule={"interval_seconds": 3600}))
    assert wait_for_warm_up(handle)  # what the demos wait for: status() says warming_up until then
    assert tq_imported(handle) and call(handle, "status")["warming_up"] is False
    assert reports(handle) == []  # no sweep imported it


def tq_imported(handle: Any) -> bool:
    imported: bool = ray.get(handle.__ray_call__.remote(remote_side.transfer_queue_imported), timeout=60)
    return imported


def idle_status(handle: Any) -> dict[str, Any] | None:
    status: dict[str, Any] = call(handle, "status")
    return None if status["sweeping"] else status


def test_start_sidecar_is_idempotent_and_shutdown_closes_it(
    make_config: MakeConfig, sidecar: StartSidecar
) -> None:
    """Under the fixed name, as users start it: a second start with the same config and options (another
    driver, a retry, a second `tq-gc serve`) finds the running one; other options are refused."""
    config = make_config()
    first = sidecar(config, name=SIDECAR_NAME, duty_cycle=0.5, metrics_port=0)
    again = start_sidecar(config, duty_cycle=0.5, metrics_port=0)
    for other, differing in [
        ({"dry_run": True, "duty_cycle": 0.5, "metrics_port": 0}, "dry_run=False (this start: True)"),
        ({"metrics_port": 0}, "duty_cycle=0.5 (this start: 0.25)"),
        ({"duty_cycle": 0.5}, "metrics_port=0 (this start: None)"),
    ]:
        with pytest.raises(TqGcError, match=re.escape(differing)):
            start_sidecar(config, **other)  # not the sidecar that was asked for

    status = call(again, "status")
    assert status["actor_id"] == call(first, "status")["actor_id"]
    assert (status["name"], status["duty_cycle"]) == (SIDECAR_NAME, 0.5) and status["metrics_port"]
    named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == SIDECAR_NAME]
    assert named == [{"name": "tq-gc", "namespace": "tq_gc"}]

    call(first, "shutdown")
    call(first, "shutdown")  # idempotent
    status = call(first, "status")
    assert status["running"] is False and status["paused"] is True
    with pytest.raises(TqGcError, match="shut down"):
        call(first, "sweep_now")


def test_sidecar_registry_without_a_sidecar_says_how_to_start_one(ray_cluster: Any) -> None:
    with pytest.raises(TqGcError, match="start it first"):
        sidecar_registry(name="no-such-sidecar", namespace="tq_gc_tests")


def test_a_second_serve_leaves_the_running_sidecar_running_when_it_stops(
    make_config: MakeConfig, sidecar: StartSidecar, tmp_path: Path
) -> None:
    """`tq-gc serve` beside a running sidecar (same config, same options) streams that one's log; Ctrl-C
    on it stops the command, not the sidecar it did not start."""
    config = make_config()
    first = sidecar(config, name=SIDECAR_NAME)
    config_file = tmp_path / "gc.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_defaults=True)))
    serve = subprocess.Popen(
        [str(TQ_GC), "serve", "--config", str(config_file)],
        env=cli_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stderr is not None
        announced = wait_until("serve's announcement", lambda: "running" in serve.stderr.readline(), 120)
        assert announced
        serve.send_signal(signal.SIGINT)
        _, said = serve.communicate(timeout=120)
        assert serve.returncode == 0, said
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    status = call(first, "status")
    assert status["running"] is True and status["actor_id"] == call(first, "status")["actor_id"]
