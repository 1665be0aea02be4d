"""deploy/ray, the sidecar example: gc.yaml loads, the RayJob's pods are valid and expose the metrics port,
and start_sidecar.py starts the sidecar, then runs training and returns its exit status."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import sys
import types
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tq_gc.config import Config, load_config

from .kustomize import RAY, supported_kubernetes_versions


def _rayjob() -> dict[str, Any]:
    rayjob: dict[str, Any] = yaml.safe_load((RAY / "rayjob.yaml").read_text())
    return rayjob


def _ray_pod_templates() -> list[dict[str, Any]]:
    cluster = _rayjob()["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]


def _entrypoint_option(name: str) -> str:
    """The value of start_sidecar.py's `name` option in the RayJob's entrypoint (before its `--`)."""
    words = shlex.split(_rayjob()["spec"]["entrypoint"])
    own = words[: words.index("--")]
    assert name in own, f"the entrypoint passes no {name}: {words}"
    return own[own.index(name) + 1]


def test_the_sidecar_config_is_valid() -> None:
    config = load_config(RAY / "gc.yaml", env={})
    assert config.transfer_queue.ray_address == "auto"


@pytest.mark.parametrize("version", supported_kubernetes_versions())
def test_rayjob_pods_are_valid_and_expose_the_metrics_port(version: str) -> None:
    port = int(_entrypoint_option("--metrics-port"))  # where the sidecar serves them: chosen at its start
    ray_version = _rayjob()["spec"]["rayClusterSpec"]["rayVersion"]
    for template in _ray_pod_templates():
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kubernetes_validate.validate(wrapped, version, strict=True)
        for c in template["spec"]["containers"]:
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            assert ports.get("tqgc-metrics") == port, c["name"]
            assert f":{ray_version}-" in c["image"], "the image's Ray must be the cluster's rayVersion"


def test_rayjob_runtime_env_and_entrypoint() -> None:
    spec = _rayjob()["spec"]
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"]
    assert [req for req in runtime_env["pip"] if re.match(r"tq[-_]gc\b", req)]
    words = shlex.split(spec["entrypoint"])
    assert words[:2] == ["python", "start_sidecar.py"]
    assert (RAY / words[1]).is_file() and (RAY / words[2]).is_file()
    assert "--" in words and words.index("--") < len(words) - 1


def test_the_documented_sidecar_api_exists() -> None:
    tq_gc = importlib.import_module("tq_gc")
    assert callable(getattr(tq_gc, "start_sidecar", None)), "tq_gc.start_sidecar(config) (deploy/ray)"
    assert callable(getattr(tq_gc, "load_config", None)), "tq_gc.load_config(path) (deploy/ray)"


def test_start_sidecar_example_starts_the_sidecar_then_runs_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tq_gc

    started: list[Config] = []
    options: list[dict[str, Any]] = []

    def fake_start_sidecar(config: Config, **chosen: Any) -> str:
        started.append(config)
        options.append(chosen)
        return "handle"

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(init=lambda **kwargs: None))
    monkeypatch.setattr(tq_gc, "start_sidecar", fake_start_sidecar)
    monkeypatch.setattr(tq_gc, "load_config", lambda path: load_config(path, env={}))
    spec = importlib.util.spec_from_file_location("start_sidecar_example", RAY / "start_sidecar.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    training = ["--", sys.executable, "-c", "raise SystemExit(7)"]
    code = module.main([str(RAY / "gc.yaml"), *training])
    assert code == 7, "the training command's exit status is the job's"
    assert [config.namespace for config in started] == [load_config(RAY / "gc.yaml", env={}).namespace]
    # no metrics endpoint, the default duty, no change journal
    assert options == [{"metrics_port": None, "duty_cycle": 0.25, "change_journal": False}]

    port = _entrypoint_option("--metrics-port")
    assert module.main([str(RAY / "gc.yaml"), "--metrics-port", port, "--duty-cycle", "0.5", *training]) == 7
    assert options[-1] == {"metrics_port": int(port), "duty_cycle": 0.5, "change_journal": False}
    assert module.main([str(RAY / "gc.yaml"), "--change-journal", *training]) == 7
    assert options[-1] == {"metrics_port": None, "duty_cycle": 0.25, "change_journal": True}
    for wrong in ([str(RAY / "gc.yaml"), "python", "train.py"], [str(RAY / "gc.yaml"), "--"]):
        with pytest.raises(SystemExit, match="usage"):
            module.main(wrong)
