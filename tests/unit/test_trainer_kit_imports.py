"""The trainer kit is light: a trainer that imports it loads redis and tq-gc's own modules, and nothing of
the sweeper's (pydantic config, APScheduler, Ray, torch, YAML, the CLI's libraries).

Each import runs in a fresh interpreter, which lists what it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SWEEPER_ONLY = {"pydantic", "apscheduler", "ray", "torch", "transfer_queue", "yaml", "click", "rich"}
TRAINER_IMPORTS = [
    "from tq_gc import GcClient",
    "import tq_gc.publish.client",
    "from tq_gc import AdmissionRegistry, write_manifest",
]


def loaded_by(statement: str) -> set[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("statement", TRAINER_IMPORTS)
def test_the_trainer_kit_loads_redis_and_its_own_modules_only(statement: str) -> None:
    beside_redis = loaded_by(statement) - loaded_by("import redis")
    roots = {name.split(".")[0] for name in beside_redis}
    assert not roots & SWEEPER_ONLY, f"{statement} loads {sorted(roots & SWEEPER_ONLY)}"
    foreign = sorted(roots - set(sys.stdlib_module_names) - {"tq_gc"})
    assert not foreign, f"{statement} loads {foreign} beside redis, the standard library and tq_gc"


def test_the_public_names_are_still_there_and_lazy() -> None:
    import tq_gc

    for name in tq_gc.__all__:
        assert getattr(tq_gc, name) is not None, name
    assert set(dir(tq_gc)) >= set(tq_gc.__all__)
