"""deploy/k8s renders the same with this suite's small kustomize as with the real one."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from .kustomize import OVERLAYS, built, json_patch, kustomization_dir, set_image


def test_the_small_kustomize_applies_what_it_claims() -> None:
    doc: dict[str, Any] = {"spec": {"args": ["a"], "name": "x"}}
    json_patch(doc, {"op": "add", "path": "/spec/args/-", "value": "b"})
    json_patch(doc, {"op": "add", "path": "/spec/args/0", "value": "first"})
    json_patch(doc, {"op": "replace", "path": "/spec/name", "value": "y"})
    assert doc == {"spec": {"args": ["first", "a", "b"], "name": "y"}}
    with pytest.raises(AssertionError, match="patch test failed"):
        json_patch(doc, {"op": "test", "path": "/spec/name", "value": "x"})
    pod: dict[str, Any] = {
        "kind": "Pod",
        "spec": {"template": {"spec": {"containers": [{"image": "tq-gc"}]}}},
    }
    set_image(pod, {"name": "tq-gc", "newName": "reg/tq-gc", "newTag": "1"})
    assert pod["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/tq-gc:1"


@pytest.mark.parametrize("name", ["base", *OVERLAYS])
def test_rendered_manifests_match_a_real_kustomize(name: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH to cross-check the small kustomize against")
    result = subprocess.run(
        [kubectl, "kustomize", str(kustomization_dir(name))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    real = [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    def key(doc: dict[str, Any]) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    assert sorted(real, key=key) == sorted(built(name), key=key)
