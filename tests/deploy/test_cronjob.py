"""The CronJob: its args parse with the real CLI, its config loads with the real loader and the env it sets,
its pod is locked down, and its Job limits and failure policy say what deploy/k8s/README.md says."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import yaml

from tq_gc.config import Config, load_config

from .dockerfile import dockerfile_stages
from .kustomize import (
    CONFIG_ARGS,
    DUMMY_STATE_URL,
    NON_ROOT_UID,
    OVERLAYS,
    built,
    container,
    job_spec,
    one,
    pod_spec,
    secret_example,
)

# The exit codes that are outcomes (docs/operations.md, "Exit codes"), not errors: each ends the Job at once.
BAD_CONFIG, SKIPPED, ABORTED = 2, 3, 4


def test_the_cronjob_reads_the_state_url_from_the_example_secrets_name_and_key() -> None:
    secret = secret_example()
    env = {item["name"]: item for item in container(built("base"))["env"]}
    assert "value" not in env["TQGC_STATE_URL"], "the state URL carries a password: from a Secret only"
    ref = env["TQGC_STATE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]
    assert not ref.get("optional", False), "without the Secret the pod must not start"


# --------------------------------------------------------------------------------------------------------
# The args parse with the real CLI; only the execute overlay deletes.


def parse_cli(args: list[str]) -> bool | None:
    """Parse args with tq-gc's CLI; the value of `--execute`, or None where only parse_args is offered."""
    return _parse_cli(args)[1]


def _parse_cli(args: list[str]) -> tuple[dict[str, Any], bool | None]:
    """The global options' values, and the value of `--execute` (None where only parse_args is offered)."""
    cli_module = importlib.import_module("tq_gc.cli")
    group = getattr(cli_module, "cli", None)
    if group is None:
        cli_module.parse_args(args)
        return {}, None
    ctx = group.make_context("tq-gc", list(args), resilient_parsing=False)
    # ctx.args: what follows the sub-command's name, which ends the global options
    after_global_options = list(args)[len(args) - len(ctx.args) - 1 :]
    name, command, rest = group.resolve_command(ctx, after_global_options)
    assert command is not None, f"no sub-command {after_global_options[0]!r}"
    sub_ctx = command.make_context(name, rest, parent=ctx, resilient_parsing=False)
    execute = next(param for param in command.params if "--execute" in param.opts)
    return dict(ctx.params), bool(sub_ctx.params[execute.name])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cronjob_args_parse_with_the_cli(overlay: str) -> None:
    c = container(built(overlay))
    assert "command" not in c, "args only: the image's ENTRYPOINT is tq-gc"
    execute = parse_cli(c["args"])
    assert execute in (None, overlay == "execute")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_cronjob_logs_json_lines_for_the_cluster_log_collector(overlay: str) -> None:
    global_options, _ = _parse_cli(container(built(overlay))["args"])
    assert global_options["log_format"] == "json"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_cronjob_chooses_its_duty_cycle_on_the_command_line(overlay: str) -> None:
    """How hard the CronJob presses on the job's TransferQueue is chosen where it starts, not in the
    config (which refuses transfer_queue.pacing)."""
    global_options, _ = _parse_cli(container(built(overlay))["args"])
    assert global_options["duty_cycle"] == 0.25


def test_the_cli_parser_refuses_what_it_should() -> None:
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
# The ConfigMap's config, with the env the CronJob sets, is a valid config that says what we mean.


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
    secret = secret_example()
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
# A restricted security context.


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


# --------------------------------------------------------------------------------------------------------
# Schedule, Job limits and what each exit code does to the Job.


def _rules(action: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = job_spec(built("base"))["podFailurePolicy"]["rules"]
    return [rule for rule in rules if rule["action"] == action]


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
    # Exit codes that are outcomes (docs/operations.md) end the Job at once; success is never one of them.
    fail_codes = {code for rule in _rules("FailJob") for code in rule["onExitCodes"]["values"]}
    assert fail_codes == {BAD_CONFIG, SKIPPED, ABORTED}


def test_exit_codes_name_the_tq_gc_container() -> None:
    for rule in _rules("FailJob"):
        assert rule["onExitCodes"]["containerName"] == container(built("base"))["name"]
        assert rule["onExitCodes"]["operator"] == "In"


def test_a_skipped_sweep_is_never_retried_within_its_job() -> None:
    """Exit 3 ends the Job (FailJob), by choice (deploy/k8s/README.md): Ignore would start a new pod at
    once, again and again while the lease is held, and Count would retry it against the same lease."""
    for action in ("Ignore", "Count"):
        codes = [code for rule in _rules(action) for code in rule.get("onExitCodes", {}).get("values", [])]
        assert SKIPPED not in codes, action


def test_evicted_pods_are_ignored_on_a_true_disruption_condition() -> None:
    conditions = [condition for rule in _rules("Ignore") for condition in rule.get("onPodConditions", [])]
    assert conditions == [{"type": "DisruptionTarget", "status": "True"}]
