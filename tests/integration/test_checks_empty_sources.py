"""`tq-gc check` flags the configurations that read as zero references: a tag key path that resolves in no
row of its partition, publishers and sweepers on different namespaces or Redis databases, and a source
that named rows at the last sweep and reads as empty now. Real files, the memory row store, a real Redis."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tq_gc.cli import EXIT_OK, EXIT_USAGE, main
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.wiring import Runtime

from support.scripted_store import ScriptedState
from support.world import DATA, STAGING, World

PLAN = "route_assembly_plan.cleanup_staging_keys"


def run_check(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rows: MemoryRowStore,
    runtime: Runtime | None = None,
    **config: Any,
) -> tuple[int, dict[str, dict[str, Any]]]:
    values = {
        "namespace": "job-42",
        "scope": [{"partition": STAGING, "all_keys": True}],
        "tag_references": [{"partition": DATA, "key_path": PLAN, "target_partition": STAGING}],
    } | config
    path = tmp_path / "gc.yaml"
    path.write_text(yaml.safe_dump(values))
    capsys.readouterr()
    code = main(["check", "--config", str(path), "--json"], runtime or Runtime(row_store=rows))
    doc = json.loads(capsys.readouterr().out)
    return code, {check["name"]: check for check in doc["checks"]}


def tagged(*tags: dict[str, Any]) -> MemoryRowStore:
    rows = MemoryRowStore()
    rows.put(STAGING, "r1/c1")
    for index, row_tags in enumerate(tags):
        rows.put(DATA, f"g{index}_g0", row_tags)
    return rows


def key_path_check(checks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    [found] = [check for name, check in checks.items() if name.startswith("tag key path")]
    return found


# -- a tag key path that resolves nowhere ----------------------------------------------------------


def test_a_key_path_typo_is_flagged_with_the_tags_the_rows_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tagged({"route_assembly_plan": {"cleanup_staging_keys": ["r1/c1"]}, "uid": "g0"}, {"uid": "g1"})
    code, checks = run_check(
        tmp_path,
        capsys,
        rows,
        tag_references=[
            {"partition": DATA, "key_path": "route_plan.cleanup_staging_keys", "target_partition": STAGING}
        ],
    )
    check = key_path_check(checks)
    assert code == EXIT_USAGE and not check["ok"], check
    assert "'route_plan.cleanup_staging_keys'" in check["detail"]
    assert "2 sampled rows" in check["detail"] and "route_assembly_plan" in check["detail"]


def test_a_key_path_that_resolves_in_one_row_passes_even_as_a_json_string(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = json.dumps({"cleanup_staging_keys": []})  # present but naming nothing now: the path is right
    rows = tagged({"uid": "g0"}, {"route_assembly_plan": plan})
    code, checks = run_check(tmp_path, capsys, rows)
    check = key_path_check(checks)
    assert code == EXIT_OK and check["ok"], check
    assert "resolves in 1 of 2 sampled rows" in check["detail"]


def test_a_partition_without_tagged_rows_cannot_be_judged_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tagged({}, {})
    code, checks = run_check(tmp_path, capsys, rows)
    check = key_path_check(checks)
    assert code == EXIT_OK and check["ok"] and "no row" in check["detail"] and "tags" in check["detail"]


# -- publishers on another namespace or Redis database ---------------------------------------------


def redis_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], state_url: str
) -> tuple[int, dict[str, Any]]:
    code, checks = run_check(tmp_path, capsys, tagged({}), state_url=state_url, tag_references=[])
    return code, checks["namespace"]


def test_publishers_on_another_namespace_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    publishers = AdmissionRegistry.connect(redis_url, namespace="job-24")
    publishers.admit("adm-1", {STAGING: ["r1/c1"]}, ttl_seconds=600)
    publishers.close()
    code, check = redis_check(tmp_path, capsys, redis_url)
    assert code == EXIT_USAGE and not check["ok"], check
    assert "'job-42'" in check["detail"] and "'job-24' (db 0" in check["detail"]


def test_publishers_on_another_database_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    publishers = AdmissionRegistry.connect(redis_url.rsplit("/", 1)[0] + "/3", namespace="job-42")
    publishers.admit("adm-1", {STAGING: ["r1/c1"]}, ttl_seconds=600)
    publishers.close()
    code, check = redis_check(tmp_path, capsys, redis_url)
    assert code == EXIT_USAGE and not check["ok"], check
    assert "'job-42' (db 3" in check["detail"]


def test_publishers_nobody_sweeps_are_named_after_our_own_sweeps_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    """Once this config has swept, "no runs" no longer tells; admissions elsewhere that no sweeper
    reads still do."""
    code, _ = run_check(tmp_path, capsys, tagged({}), state_url=redis_url, tag_references=[])
    main(["sweep", "--config", str(tmp_path / "gc.yaml")], Runtime(row_store=tagged({})))
    publishers = AdmissionRegistry.connect(redis_url, namespace="job-24")
    publishers.admit("adm-1", {STAGING: ["r1/c1"]}, ttl_seconds=600)
    publishers.close()
    code, check = redis_check(tmp_path, capsys, redis_url)
    assert code == EXIT_USAGE and not check["ok"] and "'job-24' (db 0" in check["detail"], check


def test_a_namespace_with_admissions_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    for namespace in ("job-42", "job-24"):
        publishers = AdmissionRegistry.connect(redis_url, namespace=namespace)
        publishers.admit("adm-1", {STAGING: ["r1/c1"]}, ttl_seconds=600)
        publishers.release("adm-1")  # released: admissions were recorded all the same
        publishers.close()
    code, check = redis_check(tmp_path, capsys, redis_url)
    assert code == EXIT_OK and check["ok"], check


def test_a_lone_new_namespace_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    code, check = redis_check(tmp_path, capsys, redis_url)
    assert code == EXIT_OK and check["ok"] and "no admission" in check["detail"], check


# -- a source that named rows at the last sweep and reads as empty now -----------------------------


def test_a_source_emptied_since_the_last_sweep_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path)
    world.rows.put(STAGING, "held/c1")
    world.write_manifest(["held/c1"])
    world.sweep()
    config = json.loads(world.config.model_dump_json())
    runtime = Runtime(world.state, world.rows)
    code, checks = run_check(tmp_path, capsys, world.rows, runtime, **config)
    assert code == EXIT_OK and checks["sources since the last sweep"]["ok"], checks
    recorded = world.state.source_counts()
    shutil.rmtree(tmp_path / "ckpt")
    (tmp_path / "ckpt").mkdir()  # the volume unmounted: its empty mount point
    code, checks = run_check(tmp_path, capsys, world.rows, runtime, **config)
    check = checks["sources since the last sweep"]
    assert code == EXIT_USAGE and not check["ok"]
    assert f"manifests:{tmp_path}/ckpt/**/gc-manifest.json" in check["detail"] and "1 row" in check["detail"]
    assert world.state.source_counts() == recorded  # the check records nothing


def test_a_store_whose_record_of_the_sources_is_new_says_empty_sources_skip_sweeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path)
    world.state = ScriptedState("job-42", clock_ms=world.clock)  # no baseline: new, or restarted empty
    world.rows.put(STAGING, "held/c1")  # the scope partition exists (check names one that does not)
    runtime = Runtime(world.state, world.rows)
    config = json.loads(world.config.model_dump_json())
    code, checks = run_check(tmp_path, capsys, world.rows, runtime, **config)
    check = checks["sources since the last sweep"]
    assert code == EXIT_OK and check["ok"] and "baseline_rebuilding" in check["detail"], check
    world.age()
    world.sweep()  # the record begins: still under a grace old
    world.age()
    code, checks = run_check(tmp_path, capsys, world.rows, runtime, **config)
    assert "baseline_rebuilding" not in checks["sources since the last sweep"]["detail"], checks


def test_a_database_the_user_may_not_select_is_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    publishers = AdmissionRegistry.connect(redis_url.rsplit("/", 1)[0] + "/3", namespace="job-24")
    publishers.admit("adm-1", {STAGING: ["r1/c1"]}, ttl_seconds=600)
    publishers.close()
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "sweeper", "on", ">pw", "~*", "&*", "+@all", "-select")
    admin.close()
    code, check = redis_check(tmp_path, capsys, redis_url.replace("redis://", "redis://sweeper:pw@"))
    assert code == EXIT_OK and check["ok"], check
