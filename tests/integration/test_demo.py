"""`tq-gc demo`, the README's first command, run as a user runs it: in its own process, its own cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.testbed.ray_head import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.ray

DEMO_TIMEOUT_S = 1200  # a hang guard: 30 s on an idle 2-core machine; 230 s seen beside other work


def demo_ray_processes() -> set[int]:
    """Pids of Ray daemons of a demo's cluster (the demo keeps Ray's files in a tq-gc-demo- temp dir)."""
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    pids = set()
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        daemon = args.split(" ", 1)[0].rsplit("/", 1)[-1]
        if daemon in ("raylet", "gcs_server") and "tq-gc-demo-" in args:
            pids.add(int(pid))
    return pids


@pytest.mark.timeout(DEMO_TIMEOUT_S + 60)
def test_demo_reclaims_every_orphan_keeps_every_referenced_row_and_cleans_up() -> None:
    before = demo_ray_processes()
    done = subprocess.run(
        [sys.executable, "-m", "tq_gc", "demo"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        env={**subprocess_env(), "COLUMNS": "200"},
        cwd=REPO_ROOT,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "OK: every orphan reclaimed" in out
    for how in ("prefix chunk dropped by the forest lane", "abandoned attempt", "ghost key", "warm-up key"):
        assert any(how in line and "reclaimed" in line and "/" in line for line in out.splitlines()), how
    assert "protected by admissions" in out and "manifests 6" in out, "the manifest protected the chunks"
    assert "tqgc_rows_deleted_total 10.0" in out
    assert "LOST" not in out
    assert any(line.startswith("│ bytes") and "reclaimed" in line for line in out.splitlines())
    assert "orphans: " in out and "referenced" in out  # the last sweep's bytes
    assert demo_ray_processes() <= before, "the demo left Ray daemons running"
