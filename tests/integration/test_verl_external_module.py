"""How `tq_gc_verl.py` (docs/integrations.md, "verl") reaches verl's TaskRunner: a driver started as
`python -m verl.trainer.main_ppo` from the directory that holds the file, with verl's own runtime env
(`get_ppo_ray_runtime_env`) and the documented `+ray_kwargs.ray_init.runtime_env.env_vars`. Ray puts the
driver's current directory on its workers' sys.path, and verl's `__init__` imports every module named in
VERL_USE_EXTERNAL_MODULES: so the module is imported in the TaskRunner's process as soon as it imports
verl, with TQGC_CONFIG in its environment. Run on a real Ray cluster with verl 0.9.1's own `__init__`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tools.testbed.ray_head import subprocess_env

pytestmark = pytest.mark.ray

TIMEOUT_S = 240.0

PROBE = """\
import os
from tq_gc.integrations.verl import CONFIG_ENV  # tq-gc imports in the TaskRunner's process

SEEN_CONFIG = os.environ.get(CONFIG_ENV)
"""

DRIVER = """\
import json, sys
import ray
from omegaconf import OmegaConf
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

documented = {"env_vars": {"VERL_USE_EXTERNAL_MODULES": "tq_gc_verl", "TQGC_CONFIG": sys.argv[2]}}
runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(None), documented)  # as verl's run_ppo merges them
ray.init(address=sys.argv[1], runtime_env=OmegaConf.to_container(runtime_env), namespace="tqgc-verl-path")

@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self):
        import verl  # what unpickling verl's TaskRunnerV1 does first
        module = sys.modules.get("tq_gc_verl")
        return None if module is None else {"config": module.SEEN_CONFIG, "file": module.__file__}

runner = TaskRunner.remote()
print(json.dumps(ray.get(runner.run.remote(), timeout=180)))
ray.kill(runner)
"""


def test_tq_gc_verl_reaches_the_taskrunner_from_the_drivers_directory(
    ray_cluster: Any, tmp_path: Path
) -> None:
    launch_dir = tmp_path / "job"
    launch_dir.mkdir()
    (launch_dir / "tq_gc_verl.py").write_text(PROBE)
    driver = tmp_path / "driver.py"  # outside launch_dir: only the driver's cwd puts the module in reach
    driver.write_text(textwrap.dedent(DRIVER))
    config = str(tmp_path / "verl.yaml")
    done = subprocess.run(
        [sys.executable, str(driver), ray_cluster.address, config],
        cwd=launch_dir,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"config": config, "file": str(launch_dir / "tq_gc_verl.py")}
