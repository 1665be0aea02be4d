"""deploy/k8s rendered offline: a small kustomize and the lookups the deploy tests share.

`build_kustomization` implements exactly the kustomize features deploy/k8s uses (resources, images, JSON 6902
patches); anything else in a kustomization.yaml is refused, not ignored. Where a real kustomize is on PATH
(`kubectl kustomize`), test_kustomize.py checks that both agree.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes_validate.utils import all_versions

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
RAY = ROOT / "deploy" / "ray"
OVERLAYS = ("dry-run", "execute")
CONFIG_ARGS = [
    *("--log-format", "json", "--duty-cycle", "0.25"),
    *("sweep", "--config", "/etc/tq-gc/config.yaml", "--json"),
]
# A stand-in for the real Secret's value: the CronJob must take the state URL from the Secret, not from YAML.
DUMMY_STATE_URL = "redis://:dummy-secret-password@redis.test.svc:6379/3"
NON_ROOT_UID = 10001
# The oldest Kubernetes minor the manifests must validate against; the newest is kubernetes-validate's.
OLDEST_SUPPORTED_MINOR = (1, 31)


def supported_kubernetes_versions() -> list[str]:
    """Every release kubernetes-validate ships schemas for, from OLDEST_SUPPORTED_MINOR to its newest."""
    versions = {v for v in all_versions() if _minor(v) >= OLDEST_SUPPORTED_MINOR}
    return sorted(versions, key=_minor)


def _minor(version: str) -> tuple[int, int]:
    major, minor = (int(part) for part in version.split(".")[:2])
    return major, minor


# --------------------------------------------------------------------------------------------------------
# A small kustomize: resources (files and directories), images, patches (JSON 6902 only).

SUPPORTED_KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "images", "patches"}


def build_kustomization(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - SUPPORTED_KUSTOMIZATION_KEYS
    assert not unsupported, f"{directory}: this test's kustomize does not implement {sorted(unsupported)}"
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            resources.extend(build_kustomization(path))
        else:
            resources.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    for patch in kustomization.get("patches", []):
        _apply_patch(directory, patch, resources)
    for image in kustomization.get("images", []):
        for resource in resources:
            set_image(resource, image)
    return resources


def _apply_patch(directory: Path, patch: dict[str, Any], resources: list[dict[str, Any]]) -> None:
    text = patch["patch"] if "patch" in patch else (directory / patch["path"]).read_text()
    operations = yaml.safe_load(text)
    assert isinstance(operations, list), "strategic-merge patches are not implemented here: use JSON 6902"
    targets = [resource for resource in resources if _matches_target(resource, patch["target"])]
    assert targets, f"patch target {patch['target']} matches no resource"
    for resource in targets:
        for operation in operations:
            json_patch(resource, operation)


def _matches_target(resource: dict[str, Any], target: dict[str, str]) -> bool:
    group, _, version = resource["apiVersion"].rpartition("/")
    actual = {
        "group": group,
        "version": version,
        "kind": resource["kind"],
        "name": resource["metadata"]["name"],
    }
    return all(actual[key] == value for key, value in target.items())


def json_patch(document: dict[str, Any], operation: dict[str, Any]) -> None:
    """RFC 6902 add/replace/remove/test on one document."""
    *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"][1:].split("/")]
    node: Any = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    op = operation["op"]
    if op == "test":
        current = node[int(last)] if isinstance(node, list) else node[last]
        assert current == operation["value"], f"patch test failed at {operation['path']}: {current!r}"
    elif isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if op == "add":
            node.insert(index, operation["value"])
        elif op == "replace":
            node[index] = operation["value"]
        elif op == "remove":
            del node[index]
        else:
            raise AssertionError(f"JSON patch op {op!r} not implemented")
    elif op in ("add", "replace"):
        assert op == "add" or last in node, f"replace of a missing {operation['path']}"
        node[last] = operation["value"]
    elif op == "remove":
        del node[last]
    else:
        raise AssertionError(f"JSON patch op {op!r} not implemented")


def set_image(resource: dict[str, Any], image: dict[str, str]) -> None:
    for spec in _pod_specs(resource):
        for container in spec.get("initContainers", []) + spec.get("containers", []):
            name = re.split(r"[@:]", container["image"], maxsplit=1)[0]
            if name != image["name"]:
                continue
            new = image.get("newName", name)
            if "digest" in image:
                container["image"] = f"{new}@{image['digest']}"
            else:
                tag = image.get(
                    "newTag", container["image"][len(name) + 1 :] if ":" in container["image"] else ""
                )
                container["image"] = f"{new}:{tag}" if tag else new


def _pod_specs(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = resource.get("spec", {})
    if resource["kind"] == "CronJob":
        yield spec["jobTemplate"]["spec"]["template"]["spec"]
    elif "template" in spec:
        yield spec["template"]["spec"]


# --------------------------------------------------------------------------------------------------------
# Lookups in the rendered manifests.


def kustomization_dir(name: str) -> Path:
    return K8S / "base" if name == "base" else K8S / "overlays" / name


@functools.cache
def _built(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(build_kustomization(kustomization_dir(name)))


def built(name: str) -> list[dict[str, Any]]:
    """The rendered manifests of `base` or an overlay; a fresh copy the test may change."""
    return copy.deepcopy(list(_built(name)))


def one(resources: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [r for r in resources if r["kind"] == kind and name in (None, r["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def job_spec(resources: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(resources, "CronJob")["spec"]["jobTemplate"]["spec"]
    return spec


def pod_spec(resources: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = job_spec(resources)["template"]["spec"]
    return spec


def container(resources: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec(resources)["containers"]
    assert [c["name"] for c in containers] == ["tq-gc"]
    return containers[0]


def secret_example() -> dict[str, Any]:
    secret: dict[str, Any] = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
    return secret
