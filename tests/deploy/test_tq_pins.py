"""tq-gc installs beside the training job's own TransferQueue, torch and Ray without changing them: in the
venv of each supported TQ (the job's environment, pinned), `pip install` of this checkout would install
tq-gc alone (pip's own resolver, a dry run with its report). Also: the versions CI tests, the package's
range and the versions internals.py was read from are the same."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tq_gc.stores.transferqueue.internals import READ_FROM

from .kustomize import ROOT
from support.tq_venvs import NEWEST, python_of

DRY_RUN_TIMEOUT_S = 300
KEPT = ("transferqueue", "torch", "ray")


def installed(python: Path) -> dict[str, str]:
    code = f"import importlib.metadata as m, json; print(json.dumps({{d: m.version(d) for d in {KEPT!r}}}))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=120)
    versions: dict[str, str] = json.loads(out.stdout)
    return versions


@pytest.mark.timeout(DRY_RUN_TIMEOUT_S + 2 * 120)  # the dry run and two package listings, each limited
@pytest.mark.parametrize("version", READ_FROM)
def test_installing_tq_gc_beside_a_job_pinning_this_tq_keeps_its_tq_torch_and_ray(
    version: str, tmp_path: Path
) -> None:
    python = python_of(version)
    before = installed(python)
    assert before["transferqueue"] == version
    report = tmp_path / "report.json"
    dry_run = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
         "--report", str(report), str(ROOT)],
        capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    would_install = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert set(would_install) == {"tq-gc"}, f"pip would change the job's environment: {would_install}"
    assert installed(python) == before  # a dry run: nothing changed


def test_the_package_range_holds_every_version_tq_gc_was_read_from_and_ci_tests_each() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [tq] = [dep for dep in dependencies if dep.startswith("transferqueue")]
    allowed = SpecifierSet(tq.removeprefix("transferqueue"))
    assert all(version in allowed for version in READ_FROM), tq
    assert "0.1.8" not in allowed, "older than any version read: not allowed"
    test_script = (ROOT / "scripts" / "test").read_text()
    [older] = re.findall(r'^older_tq_versions=\$\{TQ_VERSIONS-"([^"]*)"\}$', test_script, re.MULTILINE)
    assert older.split() == [v for v in READ_FROM if v != NEWEST], "scripts/test tests each older TQ"
