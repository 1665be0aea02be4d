"""deploy/k8s/README.md's exit codes as the CLI really gives them: a CronJob sweep that cannot reach its
Redis ends aborted, exit 4 (cause store_failed), which fails the Job at once; exit 1 is kept for errors
outside a sweep."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tools.testbed.cli import TQ_GC, cli_env
from tools.testbed.redis_server import free_port

from .kustomize import ROOT

README = ROOT / "deploy" / "k8s" / "README.md"


def exit_row(code: int) -> str:
    return next(line for line in README.read_text().splitlines() if line.startswith(f"| {code} |"))


def test_a_sweep_whose_redis_is_unreachable_exits_4_as_the_k8s_readme_says(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "namespace": "k8s-exit-codes",
                "state_url": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
                "transfer_queue": {"ray_address": "auto"},
                "scope": [{"partition": "rollout_staging", "all_keys": True}],
            }
        )
    )
    done = subprocess.run(
        [str(TQ_GC), "sweep", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(),
        check=False,
    )
    assert done.returncode == 4, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert (report["outcome"], report["cause"]) == ("aborted", "store_failed"), report
    assert "Redis unreachable" in exit_row(4)
    assert "unreachable" not in exit_row(1)
