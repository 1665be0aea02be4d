"""Every manifest deploy/ ships validates, strictly (unknown fields are errors), against the schemas of every
Kubernetes minor from 1.31 to the newest kubernetes-validate knows."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from .kustomize import (
    K8S,
    OLDEST_SUPPORTED_MINOR,
    OVERLAYS,
    built,
    one,
    secret_example,
    supported_kubernetes_versions,
)

VERSIONS = supported_kubernetes_versions()


def test_kubernetes_validate_ships_a_current_release() -> None:
    major, minor = (int(part) for part in latest_version().split(".")[:2])
    assert (major, minor) >= (1, 33), f"kubernetes-validate's newest schemas are for {latest_version()}"


def test_the_checked_releases_run_from_the_oldest_supported_minor_to_the_newest() -> None:
    oldest = ".".join(map(str, OLDEST_SUPPORTED_MINOR)) + ".0"
    assert VERSIONS[0] == oldest, f"kubernetes-validate has no schemas for {oldest}"
    assert VERSIONS[-1] == latest_version()
    minors = [int(version.split(".")[1]) for version in VERSIONS]
    assert minors == list(range(minors[0], minors[-1] + 1)), "a minor in between is missing"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["base", *OVERLAYS])
def test_every_rendered_manifest_is_valid_kubernetes(name: str, version: str) -> None:
    resources = built(name)
    assert {r["kind"] for r in resources} == {"ServiceAccount", "ConfigMap", "CronJob"}
    for resource in resources:
        kubernetes_validate.validate(resource, version, strict=True)


def test_a_pod_condition_rule_without_status_is_invalid_before_1_35() -> None:
    """The shape that broke 1.31 to 1.34: these schemas require `status` in onPodConditions."""
    cronjob = one(built("base"), "CronJob")
    for rule in cronjob["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"]:
        for condition in rule.get("onPodConditions", []):
            del condition["status"]
    with pytest.raises(kubernetes_validate.ValidationError, match="status"):
        kubernetes_validate.validate(cronjob, "1.31.0", strict=True)


def test_strict_validation_rejects_a_misspelled_field() -> None:
    cronjob = one(built("base"), "CronJob")
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(cronjob, latest_version(), strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_secret_example_is_valid_kubernetes(version: str) -> None:
    kubernetes_validate.validate(secret_example(), version, strict=True)


def test_the_secret_is_an_example_outside_every_kustomization() -> None:
    for path in K8S.rglob("kustomization.yaml"):
        kustomization = yaml.safe_load(path.read_text())
        assert "secretGenerator" not in kustomization, path
        listed = [Path(path.parent, entry).resolve() for entry in kustomization.get("resources", [])]
        assert K8S / "base" / "secret.example.yaml" not in listed, path
    for name in ("base", *OVERLAYS):
        assert all(r["kind"] != "Secret" for r in built(name))
