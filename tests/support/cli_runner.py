"""The CLI run in-process against memory stores handed in: what the CLI tests drive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.testbed.clock import ManualClock
from tq_gc.cli import main
from tq_gc.state.memory import MemoryState
from tq_gc.wiring import Runtime

from support.baseline import with_old_baseline
from support.scripted_store import ScriptedRowStore

STAGING = "rollout_staging"


class CliRunner:
    """A config file in tmp_path, a memory state on a manual clock, a scripted row store."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.clock = ManualClock()
        self.state = with_old_baseline(MemoryState("job-42", clock_ms=self.clock))
        self.rows = ScriptedRowStore()
        self.manifest_dir = tmp_path / "ckpt"
        self.manifest_dir.mkdir()
        self.config_path = tmp_path / "gc.yaml"
        self.write_config()

    def write_config(self, **extra: Any) -> None:
        config = {
            "namespace": "job-42",
            "scope": [{"partition": STAGING, "prefixes": ["__generation_cut__/", "r"]}],
            "grace_seconds": 120,
            "manifests": [{"glob": f"{self.manifest_dir}/**/gc-manifest.json"}],
            "limits": {"max_delete_fraction": 1.0},
            **extra,
        }
        self.config_path.write_text(yaml.safe_dump(config))

    def run(self, *args: str, runtime: Runtime | None = None) -> tuple[int, str, str]:
        """`tq-gc <command> --config <file> <args...>`: (exit code, stdout, stderr)."""
        self.capsys.readouterr()
        argv = [*args[:1], "--config", str(self.config_path), *args[1:]]
        code = main(argv, runtime or Runtime(self.state, self.rows))
        out, err = self.capsys.readouterr()
        return code, out, err

    def run_json(self, *args: str) -> tuple[int, dict[str, Any]]:
        code, out, _ = self.run(*args, "--json")
        return code, json.loads(out)

    def run_argv(self, *argv: str) -> tuple[int, str, str]:
        """`tq-gc <argv...>` as given (global options first)."""
        self.capsys.readouterr()
        code = main(list(argv), Runtime(self.state, self.rows))
        out, err = self.capsys.readouterr()
        return code, out, err
