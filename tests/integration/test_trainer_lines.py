"""The trainer-kit lines the README and docs/integrations.md tell a trainer to add, run as written against a
real Ray cluster, a real TransferQueue and a real Redis: the sidecar started from the example config file,
the trainer kit holding a restored call's cut rows, a checkpoint saved under a fence. The sidecar reclaims
exactly the cut rows that neither a held call nor a committed checkpoint's inventory names.

And verl's: the sidecar started from deploy/examples/verl.yaml (memory:// state: the sidecar's own), the
trainer integration reaching it through TQGC_CONFIG, and `tq-gc check --config verl.yaml` run as a user
runs it, reading the sidecar's state (not an empty one of its own)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import keys_in, wait_until

import tq_gc
from tools.testbed.cli import TQ_GC, cli_env
from tq_gc.integrations.verl import CONFIG_ENV, TqGcTrainerMixin
from tq_gc.sidecar.client import stop_sidecar

from support.nemo_rl_checkpoints import write_checkpoint
from support.nemo_rl_data_plane import cut_key
from support.nemo_rl_ledgers import inventory

pytestmark = pytest.mark.ray

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "nemo_rl.yaml"
VERL_EXAMPLE = EXAMPLE.with_name("verl.yaml")
GRACE_S = 3.0
WAIT_S = 90.0


def example_config_file(tmp_path: Path, redis_url: str, ray_address: str, staging: str, ckpt: Path) -> Path:
    """deploy/examples/nemo_rl.yaml, made this test's: its partition, checkpoint directory, Redis, and a
    grace and schedule of seconds."""
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    [scope], [manifest] = values["scope"], values["manifests"]
    scope["partition"] = manifest["partition"] = staging
    manifest["glob"] = manifest["glob"].replace("/checkpoints/", f"{ckpt}/", 1)
    values.update(
        namespace=f"trainer-{staging}",
        state_url=redis_url,
        transfer_queue={"ray_address": ray_address},
        grace_seconds=GRACE_S,
        allow_short_grace=True,
        schedule={"interval_seconds": 1},
    )
    path = tmp_path / "nemo_rl.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_the_readme_trainer_lines_protect_what_they_name(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, redis_url: str, tmp_path: Path
) -> None:
    staging, ckpt = tq_partition, tmp_path / "checkpoints"
    ckpt.mkdir()
    config_path = example_config_file(tmp_path, redis_url, ray_cluster.address, staging, ckpt)
    held = [cut_key("step_3", "g1_g0_a1", "call3", seq) for seq in range(2)]  # a restored call's cut
    saved = [cut_key("step_4", "g2_g0_a2", "call5", 0)]  # listed by the checkpoint saved below
    orphans = [cut_key("step_3", "g3_g0_a3", "call1", 0)]  # the forest lane dropped it

    # The documented lines, as a trainer writes them:
    handle = tq_gc.start_sidecar(tq_gc.load_config(config_path))
    gc = tq_gc.GcClient.connect(redis_url, namespace=f"trainer-{staging}")
    try:
        with gc.holding("restored-call-g1", {staging: held}):
            put_rows(staging, held + saved + orphans)
            with gc.checkpoint_fence("ckpt-4"):
                write_checkpoint(ckpt / "step_4", inventory({"g2": saved}))
            wait_until("the orphan is reclaimed", lambda: not keys_in(tq, staging) & set(orphans), WAIT_S)
            assert keys_in(tq, staging) == set(held + saved)  # held and saved rows whole
    finally:
        gc.close()
        stop_sidecar(handle)
    audit = tq_gc.AdmissionRegistry.connect(redis_url, namespace=f"trainer-{staging}")
    try:
        assert audit.live() == {}  # released when the call's block ended
    finally:
        audit.close()


def verl_config_file(tmp_path: Path, ray_address: str, train: str) -> Path:
    """deploy/examples/verl.yaml as shipped (memory:// state), with this test's partition and cluster. The
    sidecar it starts has the fixed name, as the trainer kit and `tq-gc check` find it: the test stops it."""
    values: dict[str, Any] = yaml.safe_load(VERL_EXAMPLE.read_text())
    for entry in values["scope"]:
        entry["partition"] = {"train": train, "val": f"{train}-val"}[entry["partition"]]
    values.update(transfer_queue={"ray_address": ray_address})
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def verl_protection(config_path: Path) -> dict[str, Any]:
    """`tq-gc check --config verl.yaml --json`'s verl line, run as a user runs it."""
    done = subprocess.run(
        [str(TQ_GC), "check", "--config", str(config_path), "--json"],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
        env=cli_env(),
    )
    checks = json.loads(done.stdout)["checks"]
    [line] = [check for check in checks if check["name"] == "verl in-flight protection"]
    return dict(line)


def test_check_reads_the_verl_sidecars_state_and_says_when_it_cannot(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_path = verl_config_file(tmp_path, ray_cluster.address, tq_partition)
    put_rows(tq_partition, [f"{tq_partition}-row"])  # the partition exists
    no_sidecar = verl_protection(config_path)
    assert not no_sidecar["ok"] and "cannot read the sidecar's state" in no_sidecar["detail"]

    handle = tq_gc.start_sidecar(tq_gc.load_config(config_path))
    monkeypatch.setenv(CONFIG_ENV, str(config_path))
    trainer = TqGcTrainerMixin()  # the documented path: TQGC_CONFIG -> the sidecar's registry
    try:
        holder = trainer._tq_gc()
        holder.hold(tq_partition, [f"{tq_partition}-row"])
        live = verl_protection(config_path)
        assert live["ok"] and live["detail"].startswith("active: trainer integration live"), live
        assert holder.prefix in live["detail"] and "1 rows" in live["detail"]
    finally:
        holder.close()
        stop_sidecar(handle)
