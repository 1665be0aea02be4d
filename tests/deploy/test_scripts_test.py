"""scripts/test runs every leg (lint, types, the main suite, the TQ-backed tests on each older TQ) even when
one fails, names every failed leg at the end and exits non-zero. Run in a toy checkout whose venvs hold
fake tools that record their calls and fail as told."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .kustomize import ROOT

SCRIPTS_TEST = ROOT / "scripts" / "test"
OLDER_TQ = ("0.1.9", "0.1.10")


def fake_tool(path: Path, log: Path, fails: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    name, exit_code = f"{path.parent.parent.name}/{path.name}", 1 if fails else 0
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit {exit_code}\n')
    path.chmod(0o755)


def toy_checkout(tmp_path: Path, failing: set[str]) -> tuple[Path, Path]:
    """A checkout with scripts/test, an install.sh that does nothing, and fake tools in each venv;
    `failing` names the tools that exit 1 ("ruff", "mypy", "python", "python-tq0.1.9", ...)."""
    checkout, log = tmp_path / "checkout", tmp_path / "calls.log"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts" / "test").write_text(SCRIPTS_TEST.read_text())
    (checkout / "scripts" / "test").chmod(0o755)
    (checkout / "scripts" / "install.sh").write_text("#!/bin/sh\nexit 0\n")
    (checkout / "scripts" / "install.sh").chmod(0o755)
    for tool in ("ruff", "mypy", "python"):
        fake_tool(checkout / ".venv" / "bin" / tool, log, tool in failing)
    for version in OLDER_TQ:
        fake_tool(checkout / f".venv-tq{version}" / "bin" / "python", log, f"python-tq{version}" in failing)
    log.write_text("")
    return checkout, log


def run_scripts_test(checkout: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checkout / "scripts" / "test"), "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(checkout),
            "TQ_VERSIONS": " ".join(OLDER_TQ),
        },
    )


def test_every_leg_runs_when_one_fails_and_the_failures_are_named_at_the_end(tmp_path: Path) -> None:
    checkout, log = toy_checkout(tmp_path, failing={"ruff", "python", "python-tq0.1.9"})
    result = run_scripts_test(checkout)
    assert result.returncode != 0, result.stderr
    ran = [line.split()[0] for line in log.read_text().splitlines()]
    older = [f".venv-tq{version}/python" for version in OLDER_TQ]
    assert ran == [".venv/ruff", ".venv/mypy", ".venv/python", *older]
    main_suite = log.read_text().splitlines()[2]
    assert main_suite.endswith("-m pytest -n 4 --dist loadgroup -q"), "xdist, then scripts/test's arguments"
    summary = result.stderr[result.stderr.rindex("failed:") :]
    for leg in ("lint", "main suite", "transferqueue 0.1.9"):
        assert leg in summary, (leg, result.stderr[-2000:])
    assert "types" not in summary and "0.1.10" not in summary, summary


def test_all_legs_passing_exits_0(tmp_path: Path) -> None:
    checkout, log = toy_checkout(tmp_path, failing=set())
    result = run_scripts_test(checkout)
    assert result.returncode == 0, result.stderr
    assert len(log.read_text().splitlines()) == 3 + len(OLDER_TQ)
    assert "failed" not in result.stderr.splitlines()[-1], result.stderr
