"""The shipping files: Dockerfile, .dockerignore, deploy/k8s (kustomize) and deploy/ray, checked offline.

No Docker engine and no cluster here, so:
- kustomize output is built by `build_kustomization` below, a small implementation of exactly the kustomize
  features deploy/k8s uses (resources, images, JSON 6902 patches); anything else in a kustomization.yaml is
  refused, not ignored. Where a real kustomize is on PATH (`kubectl kustomize`), a test checks both agree.
- every rendered manifest is validated, strictly (unknown fields are errors), against the JSON schemas of the
  newest Kubernetes release that `kubernetes-validate` ships;
- the CronJob's args go through the real CLI parser and its config through the real config loader, with the
  env the CronJob sets;
- the Dockerfile is parsed and checked; the install script it runs is run against a fake interpreter that
  records the pip commands, with the environment the Dockerfile gives it.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tq_gc.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
RAY = ROOT / "deploy" / "ray"
OVERLAYS = ("dry-run", "execute")
CONFIG_ARGS = ["sweep", "--config", "/etc/tq-gc/config.yaml", "--json"]
# A stand-in for the real Secret's value: the CronJob must take the state URL from the Secret, not from YAML.
DUMMY_STATE_URL = "redis://:dummy-secret-password@redis.test.svc:6379/3"
NON_ROOT_UID = 10001


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
            _set_image(resource, image)
    return resources


def _apply_patch(directory: Path, patch: dict[str, Any], resources: list[dict[str, Any]]) -> None:
    text = patch["patch"] if "patch" in patch else (directory / patch["path"]).read_text()
    operations = yaml.safe_load(text)
    assert isinstance(operations, list), "strategic-merge patches are not implemented here: use JSON 6902"
    targets = [resource for resource in resources if _matches_target(resource, patch["target"])]
    assert targets, f"patch target {patch['target']} matches no resource"
    for resource in targets:
        for operation in operations:
            _json_patch(resource, operation)


def _matches_target(resource: dict[str, Any], target: dict[str, str]) -> bool:
    group, _, version = resource["apiVersion"].rpartition("/")
    actual = {
        "group": group,
        "version": version,
        "kind": resource["kind"],
        "name": resource["metadata"]["name"],
    }
    return all(actual[key] == value for key, value in target.items())


def _json_patch(document: dict[str, Any], operation: dict[str, Any]) -> None:
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


def _set_image(resource: dict[str, Any], image: dict[str, str]) -> None:
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


@functools.cache
def _built(name: str) -> tuple[dict[str, Any], ...]:
    directory = K8S / "base" if name == "base" else K8S / "overlays" / name
    return tuple(build_kustomization(directory))


def built(name: str) -> list[dict[str, Any]]:
    """The rendered manifests of `base` or an overlay; a fresh copy the test may change."""
    return copy.deepcopy(list(_built(name)))


def one(resources: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [r for r in resources if r["kind"] == kind and name in (None, r["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(resources: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(resources, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


def container(resources: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec(resources)["containers"]
    assert [c["name"] for c in containers] == ["tq-gc"]
    return containers[0]


# --------------------------------------------------------------------------------------------------------
# (a) the kustomize output is what kustomize renders, and valid Kubernetes.


def test_the_small_kustomize_applies_what_it_claims() -> None:
    doc: dict[str, Any] = {"spec": {"args": ["a"], "name": "x"}}
    _json_patch(doc, {"op": "add", "path": "/spec/args/-", "value": "b"})
    _json_patch(doc, {"op": "add", "path": "/spec/args/0", "value": "first"})
    _json_patch(doc, {"op": "replace", "path": "/spec/name", "value": "y"})
    assert doc == {"spec": {"args": ["first", "a", "b"], "name": "y"}}
    with pytest.raises(AssertionError, match="patch test failed"):
        _json_patch(doc, {"op": "test", "path": "/spec/name", "value": "x"})
    pod: dict[str, Any] = {
        "kind": "Pod",
        "spec": {"template": {"spec": {"containers": [{"image": "tq-gc"}]}}},
    }
    _set_image(pod, {"name": "tq-gc", "newName": "reg/tq-gc", "newTag": "1"})
    assert pod["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/tq-gc:1"


@pytest.mark.parametrize("name", ["base", *OVERLAYS])
def test_rendered_manifests_match_a_real_kustomize(name: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH to cross-check the small kustomize against")
    directory = K8S / "base" if name == "base" else K8S / "overlays" / name
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    real = [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    def key(doc: dict[str, Any]) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    assert sorted(real, key=key) == sorted(built(name), key=key)


def test_kubernetes_validate_ships_a_current_release() -> None:
    major, minor = (int(part) for part in latest_version().split(".")[:2])
    assert (major, minor) >= (1, 33), f"kubernetes-validate's newest schemas are for {latest_version()}"


@pytest.mark.parametrize("name", ["base", *OVERLAYS])
def test_every_rendered_manifest_is_valid_kubernetes(name: str) -> None:
    resources = built(name)
    assert {r["kind"] for r in resources} == {"ServiceAccount", "ConfigMap", "CronJob"}
    for resource in resources:
        kubernetes_validate.validate(resource, latest_version(), strict=True)


def test_strict_validation_rejects_a_misspelled_field() -> None:
    cronjob = one(built("base"), "CronJob")
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(cronjob, latest_version(), strict=True)


def test_the_secret_is_an_example_outside_every_kustomization() -> None:
    for path in K8S.rglob("kustomization.yaml"):
        kustomization = yaml.safe_load(path.read_text())
        assert "secretGenerator" not in kustomization, path
        listed = [Path(path.parent, entry).resolve() for entry in kustomization.get("resources", [])]
        assert K8S / "base" / "secret.example.yaml" not in listed, path
    for name in ("base", *OVERLAYS):
        assert all(r["kind"] != "Secret" for r in built(name))
    secret = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
    kubernetes_validate.validate(secret, latest_version(), strict=True)


def test_the_cronjob_reads_the_state_url_from_the_example_secrets_name_and_key() -> None:
    secret = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
    env = {item["name"]: item for item in container(built("base"))["env"]}
    assert "value" not in env["TQGC_STATE_URL"], "the state URL carries a password: from a Secret only"
    ref = env["TQGC_STATE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]
    assert not ref.get("optional", False), "without the Secret the pod must not start"


# --------------------------------------------------------------------------------------------------------
# (b) the CronJob's args parse with the real CLI; only the execute overlay deletes.


def parse_cli(args: list[str]) -> bool | None:
    """Parse args with tq-gc's CLI; the value of `--execute`, or None where only parse_args is offered."""
    cli_module = importlib.import_module("tq_gc.cli")
    group = getattr(cli_module, "cli", None)
    if group is None:
        cli_module.parse_args(args)
        return None
    ctx = group.make_context("tq-gc", list(args), resilient_parsing=False)
    name, command, rest = group.resolve_command(ctx, list(args))
    assert command is not None, f"no sub-command {args[0]!r}"
    sub_ctx = command.make_context(name, rest, parent=ctx, resilient_parsing=False)
    execute = next(param for param in command.params if "--execute" in param.opts)
    return bool(sub_ctx.params[execute.name])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cronjob_args_parse_with_the_cli(overlay: str) -> None:
    c = container(built(overlay))
    assert "command" not in c, "args only: the image's ENTRYPOINT is tq-gc"
    execute = parse_cli(c["args"])
    assert execute in (None, overlay == "execute")


def test_the_cli_parser_refuses_what_it_should() -> None:
    click = pytest.importorskip("click")
    with pytest.raises(click.UsageError):
        parse_cli([*CONFIG_ARGS, "--no-such-flag"])


def test_only_the_execute_overlay_deletes() -> None:
    base, dry_run, execute = (container(built(n))["args"] for n in ("base", *OVERLAYS))
    assert base == CONFIG_ARGS
    assert dry_run == base
    assert "--execute" not in dry_run
    assert execute == [*base, "--execute"]


def test_overlays_differ_from_the_base_only_where_they_say() -> None:
    dry_run, base = built("dry-run"), built("base")
    assert container(base)["image"] == "tq-gc"
    assert container(dry_run).pop("image") != container(base).pop("image")
    assert dry_run == base, "the dry-run overlay sets the image and nothing else"
    execute = built("execute")
    container(execute)["args"].remove("--execute")
    assert execute == built("dry-run"), "the execute overlay is the dry-run one plus --execute"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlays_pull_the_image_from_a_registry(overlay: str) -> None:
    image = container(built(overlay))["image"]
    assert re.fullmatch(r"[\w.-]+(:\d+)?/[\w./-]+(:[\w.-]+|@sha256:[0-9a-f]{64})", image), image


# --------------------------------------------------------------------------------------------------------
# (c) the ConfigMap's config, with the env the CronJob sets, is a valid config that says what we mean.


def _configmap(resources: list[dict[str, Any]], name: str) -> dict[str, str]:
    data: dict[str, str] = one(resources, "ConfigMap", name)["data"]
    return data


def resolve_env(resources: list[dict[str, Any]], secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    env = {}
    for item in container(resources)["env"]:
        source = item.get("valueFrom", {})
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "secretKeyRef" in source:
            env[item["name"]] = secrets[source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            env[item["name"]] = _configmap(resources, ref["name"])[ref["key"]]
        else:
            raise AssertionError(f"env {item['name']}: unexpected source {source}")
    return env


def mounted_file(resources: list[dict[str, Any]], path: str) -> str:
    """The content a ConfigMap volume puts at `path` in the container."""
    mount = next(m for m in container(resources)["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod_spec(resources)["volumes"] if v["name"] == mount["name"])
    relative = path[len(mount["mountPath"]) + 1 :]
    items = {item["path"]: item["key"] for item in volume["configMap"].get("items", [])}
    return _configmap(resources, volume["configMap"]["name"])[items.get(relative, relative)]


def cronjob_config(overlay: str, tmp_path: Path) -> tuple[Config, dict[str, Any]]:
    """What `tq-gc sweep` in the CronJob loads: the mounted file, then the container's env over it."""
    resources = built(overlay)
    args = container(resources)["args"]
    text = mounted_file(resources, args[args.index("--config") + 1])
    secret = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
    secrets = {(secret["metadata"]["name"], key): DUMMY_STATE_URL for key in secret["stringData"]}
    (tmp_path / "config.yaml").write_text(text)
    config = load_config(tmp_path / "config.yaml", env=resolve_env(resources, secrets))
    return config, yaml.safe_load(text)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_configmap_config_loads_with_the_cronjobs_env(overlay: str, tmp_path: Path) -> None:
    config, raw = cronjob_config(overlay, tmp_path)
    assert config.state_url == DUMMY_STATE_URL, "the Secret's URL must override config.yaml's"
    assert urlsplit(raw["state_url"]).password is None, "no password in the ConfigMap"
    for url in (config.state_url, raw["state_url"]):
        assert urlsplit(url).scheme in ("redis", "rediss"), "a CronJob needs a shared state store"
    assert config.transfer_queue.ray_address.startswith("ray://")
    assert [(s.partition, s.prefixes) for s in config.scope] == [
        ("rollout_staging", ("__generation_cut__/", "__schema__:"))
    ]
    assert "rollout_staging" not in config.protected_partitions
    assert config.grace_seconds == 900
    assert config.manifests and config.tag_references


def test_every_manifest_glob_is_on_a_mounted_volume(tmp_path: Path) -> None:
    config, _ = cronjob_config("execute", tmp_path)
    mounts = [m["mountPath"] for m in container(built("execute"))["volumeMounts"]]
    for source in config.manifests:
        assert any(source.glob.startswith(mount + "/") for mount in mounts), source.glob
    assert any(source.expect_nonempty for source in config.manifests), (
        "a wrong checkpoint mount must abort the sweep, not make manifest-held rows look orphaned"
    )


def test_no_credentials_in_args_or_literal_env() -> None:
    c = container(built("execute"))
    literals = [*c["args"], *(item["value"] for item in c["env"] if "value" in item)]
    assert not [text for text in literals if "://" in text and "@" in text]


# --------------------------------------------------------------------------------------------------------
# (d) restricted security context.


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_security_context_is_restricted(overlay: str) -> None:
    resources = built(overlay)
    spec, c = pod_spec(resources), container(resources)
    pod_sc, sc = spec["securityContext"], c["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] == NON_ROOT_UID
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsNonRoot"] is True
    assert sc.get("runAsUser", pod_sc["runAsUser"]) == NON_ROOT_UID
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc.get("seccompProfile", pod_sc["seccompProfile"]) == {"type": "RuntimeDefault"}
    assert not any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == one(resources, "ServiceAccount")["metadata"]["name"]


def test_tmp_is_a_writable_volume_since_the_root_filesystem_is_not() -> None:
    resources = built("base")
    tmp = next(m for m in container(resources)["volumeMounts"] if m["mountPath"] == "/tmp")
    volume = next(v for v in pod_spec(resources)["volumes"] if v["name"] == tmp["name"])
    assert "emptyDir" in volume
    assert not tmp.get("readOnly", False)


def test_the_pod_runs_as_the_images_user() -> None:
    user = dockerfile_stages()[-1].last("USER")
    assert user.split(":")[0] == str(pod_spec(built("base"))["securityContext"]["runAsUser"])


def test_cronjob_schedule_and_job_limits() -> None:
    spec = one(built("base"), "CronJob")["spec"]
    job = spec["jobTemplate"]["spec"]
    assert spec["schedule"] == "*/5 * * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    for key in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        assert isinstance(spec[key], int), key
    for key in ("activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"):
        assert isinstance(job[key], int), key
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert container(built("base"))["resources"].keys() == {"requests", "limits"}
    # Exit codes that are outcomes (DESIGN.md) end the Job at once; success is never one of them.
    fail_codes = {
        code
        for rule in job["podFailurePolicy"]["rules"]
        if rule["action"] == "FailJob"
        for code in rule.get("onExitCodes", {}).get("values", [])
    }
    assert fail_codes == {2, 3, 4}


# --------------------------------------------------------------------------------------------------------
# (e) the Dockerfile runs the one install recipe; the runtime stage is the venv and a non-root user.


CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.alias or self.base}: no {keyword}"
        return found[-1]

    def key_values(self, keyword: str) -> dict[str, str]:
        """ENV, ARG or LABEL of this stage, merged in order, with ARG defaults substituted."""
        args: dict[str, str] = {}
        merged: dict[str, str] = {}
        for kw, rest in self.instructions:
            if kw == "ARG":
                args.update(_key_values(rest))
            if kw == keyword:
                merged.update({k: _substitute(v, args) for k, v in _key_values(rest).items()})
        return merged


def _key_values(rest: str) -> dict[str, str]:
    """`K=V K2="V 2"` (ENV, LABEL, ARG) as a dict; a bare `K` maps to ""."""
    pairs = (word.split("=", 1) if "=" in word else (word, "") for word in shlex.split(rest))
    return {key: value for key, value in pairs}


def _substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    logical = re.sub(r"\\\n(?:[ \t]*#.*\n)*", " ", text)  # continuations; comment lines inside them drop out
    instructions = []
    for line in logical.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), re.sub(r"\s+", " ", rest).strip()))
    return instructions


def dockerfile_stages() -> list[Stage]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in dockerfile_instructions():
        if keyword == "FROM":
            words = _substitute(rest, global_args).split()
            alias = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], alias=alias))
        elif stages:
            stages[-1].instructions.append((keyword, rest))
        elif keyword == "ARG":
            global_args.update(_key_values(rest))
    return stages


def _commands(run: str) -> list[str]:
    """The programs a RUN line starts (its words after any --mount/--network flags)."""
    shell = re.sub(r"^(--\S+\s+)*", "", run)
    return [part.split()[0] for part in re.split(r"&&|\|\||;|\|", shell) if part.split()]


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


INSTALLERS = {"pip", "pip3", "uv", "poetry", "pipx", "conda", "mamba", "apt-get", "apt", "apk", "yum", "dnf"}


def test_dockerfile_has_a_builder_and_a_runtime_stage_on_the_same_image() -> None:
    builder, runtime = dockerfile_stages()
    assert builder.alias == "builder"
    assert builder.base == runtime.base == "python:3.11-slim"


def test_the_builder_runs_the_install_script_and_installs_nothing_on_its_own() -> None:
    builder, _ = dockerfile_stages()
    commands = [command for run in builder.all("RUN") for command in _commands(run)]
    assert commands == ["scripts/install.sh"]
    assert not [run for run in builder.all("RUN") if re.search(r"-m\s+pip|\binstall\b(?!\.sh)", run)]


def test_the_readme_and_the_image_install_with_the_same_script() -> None:
    assert "scripts/install.sh" in (ROOT / "README.md").read_text()


def test_the_builder_installs_a_regular_copy_with_cpu_torch_into_opt_venv() -> None:
    env = dockerfile_stages()[0].key_values("ENV")
    assert env["TQGC_VENV"] == "/opt/venv"
    assert env["TQGC_EDITABLE"] == "0", "an editable install does not survive leaving the source behind"
    assert env["TORCH_INDEX_URL"] == CPU_TORCH_INDEX


def test_the_builder_copies_only_what_the_install_needs_and_dockerignore_lets_it_through() -> None:
    builder, _ = dockerfile_stages()
    sources = []
    for rest in builder.all("COPY"):
        words = [word for word in shlex.split(rest) if not word.startswith("--")]
        sources += words[:-1]
    assert set(sources) == {"pyproject.toml", "README.md", "scripts/", "tq_gc/"}
    assert _pyproject()["project"]["readme"] in sources, "setuptools needs the readme pyproject names"
    for source in sources:
        probe = source + "probe.py" if source.endswith("/") else source
        assert not dockerignored(probe), f"COPY {source} but .dockerignore excludes it"


def test_the_runtime_stage_is_the_venv_and_a_non_root_user() -> None:
    builder, runtime = dockerfile_stages()
    venv = builder.key_values("ENV")["TQGC_VENV"]
    assert runtime.all("COPY") == [f"--from=builder {venv} {venv}"]
    assert {c for run in runtime.all("RUN") for c in _commands(run)} <= {"groupadd", "useradd"}
    assert not INSTALLERS & {c for run in runtime.all("RUN") for c in _commands(run)}
    user = runtime.last("USER").split(":")
    assert user[0].isdigit() and int(user[0]) != 0, "numeric and non-root, so runAsNonRoot can verify it"
    assert all(part.isdigit() and int(part) != 0 for part in user)
    assert "tq-gc" in _pyproject()["project"]["scripts"]
    assert json.loads(runtime.last("ENTRYPOINT")) == [f"{venv}/bin/tq-gc"]
    assert json.loads(runtime.last("CMD")) == ["--help"]


def test_the_runtime_stage_labels_and_python_env() -> None:
    runtime = dockerfile_stages()[-1]
    labels = runtime.key_values("LABEL")
    for key in ("title", "description", "version", "source"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.version"] == _pyproject()["project"]["version"]
    assert "${VERSION}" in next(rest for rest in runtime.all("LABEL") if "image.version" in rest)
    env = runtime.key_values("ENV")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"


# --------------------------------------------------------------------------------------------------------
# .dockerignore, evaluated as Docker does: the last matching pattern wins; a pattern matching a parent
# directory matches everything below it; `!` re-includes.


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1].replace("[!", "[^"), end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


@functools.cache
def _dockerignore_rules() -> tuple[tuple[bool, re.Pattern[str]], ...]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            pattern = re.sub(r"/+$", "", line.removeprefix("!").strip()).removeprefix("/")
            rules.append((negate, _pattern_regex(pattern)))
    return tuple(rules)


def dockerignored(path: str) -> bool:
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for negate, regex in _dockerignore_rules():
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def test_dockerignore_semantics_of_this_test() -> None:
    assert _pattern_regex("**/__pycache__").match("__pycache__")
    assert _pattern_regex("**/__pycache__").match("a/b/__pycache__")
    assert not _pattern_regex("*").match("a/b")


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        ".pytest_cache/v/cache/nodeids",
        ".mypy_cache/3.11/tq_gc/config.data.json",
        ".ruff_cache/CACHEDIR.TAG",
        ".hypothesis/examples/x",
        "tests/unit/test_deploy.py",
        "tq_gc/__pycache__/config.cpython-311.pyc",
        "tq_gc/stores/__pycache__/memory.cpython-311.pyc",
        "tq_gc.egg-info/PKG-INFO",
        "deploy/k8s/base/cronjob.yaml",
        "bench/run.py",
    ],
)
def test_dockerignore_keeps_out(path: str) -> None:
    assert dockerignored(path)


def test_dockerignore_lets_in_the_source_and_the_install_recipe() -> None:
    wanted = ["pyproject.toml", "README.md", "scripts/install.sh"]
    wanted += [
        str(p.relative_to(ROOT)) for p in (ROOT / "tq_gc").rglob("*.py") if "__pycache__" not in p.parts
    ]
    assert [path for path in wanted if dockerignored(path)] == []


# --------------------------------------------------------------------------------------------------------
# scripts/install.sh, run for real against a fake interpreter that records the pip commands.


def run_install(tmp_path: Path, env: dict[str, str]) -> list[list[str]]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    log = tmp_path / "pip.log"
    fake = venv / "bin" / "python"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\n')
    fake.chmod(0o755)
    log.write_text("")
    clean_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh")],
        env={**clean_env, **env, "TQGC_VENV": str(venv)},
        check=True,
        timeout=60,
        capture_output=True,
    )
    return [line.split() for line in log.read_text().splitlines()]


def test_install_sh_with_the_builders_env_installs_cpu_torch_then_a_regular_copy(tmp_path: Path) -> None:
    env = dockerfile_stages()[0].key_values("ENV")
    calls = run_install(tmp_path, env)
    assert len(calls) == 2
    torch_call, tq_gc_call = calls
    assert torch_call[:3] == ["-m", "pip", "install"]
    assert torch_call[torch_call.index("--index-url") + 1] == CPU_TORCH_INDEX
    assert torch_call[-1].startswith("torch==")
    assert tq_gc_call[:3] == ["-m", "pip", "install"]
    assert tq_gc_call[-1] == "."
    assert "-e" not in tq_gc_call


def test_install_sh_default_is_still_editable_and_stamped(tmp_path: Path) -> None:
    first = run_install(tmp_path, {})
    assert "--index-url" not in first[0]
    assert first[-1][-2:] == ["-e", "."]
    assert run_install(tmp_path, {}) == [], "a second run with nothing changed installs nothing"
    regular = run_install(tmp_path, {"TQGC_EDITABLE": "0"})
    assert regular[-1][-1] == "." and "-e" not in regular[-1]
    assert run_install(tmp_path, {})[-1][-2:] == ["-e", "."], "the stamp no longer vouches after a copy"


# --------------------------------------------------------------------------------------------------------
# deploy/ray: the sidecar example.


def _rayjob() -> dict[str, Any]:
    rayjob: dict[str, Any] = yaml.safe_load((RAY / "rayjob.yaml").read_text())
    return rayjob


def _ray_pod_templates() -> list[dict[str, Any]]:
    cluster = _rayjob()["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]


def test_the_sidecar_config_is_valid() -> None:
    config = load_config(RAY / "gc.yaml", env={})
    assert config.sidecar.metrics_port
    assert config.transfer_queue.ray_address == "auto"


def test_rayjob_pods_are_valid_and_expose_the_metrics_port() -> None:
    port = load_config(RAY / "gc.yaml", env={}).sidecar.metrics_port
    ray_version = _rayjob()["spec"]["rayClusterSpec"]["rayVersion"]
    for template in _ray_pod_templates():
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kubernetes_validate.validate(wrapped, latest_version(), strict=True)
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
    assert words[3] == "--" and len(words) > 4


def test_the_documented_sidecar_api_exists() -> None:
    tq_gc = importlib.import_module("tq_gc")
    assert callable(getattr(tq_gc, "start_sidecar", None)), "tq_gc.start_sidecar(config) (deploy/ray)"
    assert callable(getattr(tq_gc, "load_config", None)), "tq_gc.load_config(path) (deploy/ray)"


def test_start_sidecar_example_starts_the_sidecar_then_runs_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tq_gc

    started: list[Config] = []

    def fake_start_sidecar(config: Config) -> str:
        started.append(config)
        return "handle"

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(init=lambda **kwargs: None))
    monkeypatch.setattr(tq_gc, "start_sidecar", fake_start_sidecar)
    monkeypatch.setattr(tq_gc, "load_config", lambda path: load_config(path, env={}))
    spec = importlib.util.spec_from_file_location("start_sidecar_example", RAY / "start_sidecar.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    code = module.main([str(RAY / "gc.yaml"), "--", sys.executable, "-c", "raise SystemExit(7)"])
    assert code == 7, "the training command's exit status is the job's"
    assert [config.namespace for config in started] == [load_config(RAY / "gc.yaml", env={}).namespace]
    with pytest.raises(SystemExit, match="usage"):
        module.main([str(RAY / "gc.yaml"), "python", "train.py"])
