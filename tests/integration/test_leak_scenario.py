"""The leak scenario end to end: the toy job of simulation.py writes rows through TQ's own API into
the session's real TransferQueue (SimpleStorage) and references them through a real Redis registry and
a native manifest; the `tq-gc` console script, in a subprocess that joins the Ray cluster, sweeps it
(the sweeps that mark the rows and keep them observed run the same CLI in this process).

Checked with TQ's own calls: exactly the orphans go, every referenced row stays readable, the canonical
partition is untouched, and the job's controller outlives the CLI. Against a cluster without TQ, the
CLI exits 2 and creates nothing.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import SUBPROCESS_LEASE_WITHIN_S, SWEEP_TAIL_WITHIN_S, CliResult, keys_in, tq_gc_in_process

from tools.testbed.cli import TQ_GC, cli_env
from tq_gc import AdmissionRegistry
from tq_gc.cli.simulation import CANONICAL, STAGING, TOKENS, LeakScenario

pytestmark = pytest.mark.ray

RunPython = Callable[..., Any]
RecordTiming = Callable[[str, float], None]

CLI_TIMEOUT_S = 90.0
OBSERVE_EVERY_S = 2.0
# From one sweep's plan to the next one's lease: the last observing sweep's tail (in this process), then
# the deleting sweep starting up in a process of its own. Longer than the grace, and every row's clock
# restarts. The sweeps that mark and observe run in this process: a fresh process's exit (it leaves
# Ray) and start, between two observations, took longer than any grace here at load 20.
GRACE_S = SWEEP_TAIL_WITHIN_S + OBSERVE_EVERY_S + SUBPROCESS_LEASE_WITHIN_S
CLEAR_BATCH = 2000
CONTROLLER = "TransferQueueController"
TQ_NAMESPACE = "transfer_queue"
ADMITTED = ("live admission", "restored call's admission (normal lane)")
TAGGED = ("named by a canonical row's route plan",)


def tq_gc(*args: str, timeout_seconds: float = CLI_TIMEOUT_S) -> CliResult:
    """Run `tq-gc ARGS` in a fresh process (killed if it outlives timeout_seconds)."""
    started = time.monotonic()
    result = subprocess.run(
        [str(TQ_GC), *args], capture_output=True, text=True, timeout=timeout_seconds, env=cli_env()
    )
    return CliResult(result.returncode, result.stdout, result.stderr, time.monotonic() - started)


def clear_partition(tq: Any, partition: str) -> None:
    """Clear every key of `partition` with TQ's own calls (never TQ's own close: the session owns TQ)."""
    keys = list(tq.kv_list(partition).get(partition, {}))
    for start in range(0, len(keys), CLEAR_BATCH):
        tq.kv_clear(keys[start : start + CLEAR_BATCH], partition)
    assert not tq.kv_list(partition).get(partition)


def controller_id() -> str:
    import ray

    controller = ray.get_actor(CONTROLLER, namespace=TQ_NAMESPACE)
    assert ray.get(controller.get_config.remote(), timeout=30) is not None  # alive and serving
    return str(controller._actor_id.hex())


def write_config(path: Path, **values: Any) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


@dataclass
class Played:
    scenario: LeakScenario
    config: Path
    canonical: dict[str, Any]  # kv_list of rollout_data right after the job wrote it
    canonical_indexes: list[int]

    @property
    def kept_staging(self) -> set[str]:
        return {row.key for row in self.scenario.fates.kept if row.partition == STAGING}

    @property
    def orphans(self) -> set[str]:
        assert all(row.partition == STAGING for row in self.scenario.fates.orphans)
        return {row.key for row in self.scenario.fates.orphans}

    def held_by(self, reasons: tuple[str, ...]) -> int:
        kept = self.scenario.fates.kept
        return sum(1 for row, why in kept.items() if row.partition == STAGING and why in reasons)


@pytest.fixture
def scenario_partitions(tq: Any) -> Iterator[None]:
    """LeakScenario writes to fixed partitions of the shared session TQ: empty before and after."""
    for partition in (STAGING, CANONICAL):
        clear_partition(tq, partition)
    yield
    for partition in (STAGING, CANONICAL):
        clear_partition(tq, partition)


@pytest.fixture
def played(
    ray_cluster: Any, tq: Any, scenario_partitions: None, redis_url: str, tmp_path: Path
) -> Iterator[Played]:
    """The toy job, played: rows in TQ, admissions in Redis, a (retired) manifest in tmp_path."""
    namespace = f"leak-{uuid.uuid4().hex[:8]}"
    manifests = tmp_path / "ckpt"
    config = write_config(
        tmp_path / "tq-gc.yaml",
        namespace=namespace,
        state_url=redis_url,
        transfer_queue={"ray_address": ray_cluster.address},
        scope=[{"partition": STAGING, "all_keys": True}],
        grace_seconds=GRACE_S,
        allow_short_grace=True,
        manifests=[{"glob": f"{manifests}/**/gc-manifest.json"}],
        tag_references=[
            {
                "partition": CANONICAL,
                "key_path": "route_assembly_plan.cleanup_staging_keys",
                "target_partition": STAGING,
            }
        ],
    )
    with AdmissionRegistry.connect(redis_url, namespace=namespace) as registry:
        scenario = LeakScenario(registry, manifests)
        scenario.play()
        canonical = tq.kv_list(CANONICAL)[CANONICAL]
        meta = tq.get_client().kv_retrieve_meta(sorted(canonical), CANONICAL, create=False)
        played = Played(scenario, config, canonical, list(meta.global_indexes))
        # what the scenario promises, so that a change there cannot hollow out this test
        assert keys_in(tq, STAGING) == played.kept_staging | played.orphans
        assert set(Counter(scenario.fates.orphans.values())) == {
            "prefix chunk dropped by the forest lane",
            "abandoned attempt",
            "ghost key of an interrupted put",
            "warm-up key left by a crash",
        }
        assert played.held_by(ADMITTED) and played.held_by(TAGGED)
        yield played


def observe_until_due(capsys: Any, config: Path, marked: float, orphans: int) -> None:
    """Dry runs in this process every OBSERVE_EVERY_S, after the first sweep that began at `marked`
    (monotonic), until one finds every orphan due: grace accrues only while sweeps observe, and a dry
    run deletes nothing however late in the grace it ends. One that ended before a grace had passed
    since `marked` must find nothing due."""
    deadline = marked + 2 * GRACE_S + CLI_TIMEOUT_S
    while True:
        time.sleep(OBSERVE_EVERY_S)
        observing = tq_gc_in_process(capsys, "sweep", "--config", str(config), "--json")
        ended = time.monotonic()
        assert observing.code == 0, observing.why()
        counts = observing.json()["counts"]
        if ended < marked + GRACE_S:
            assert counts["eligible"] == 0, f"due before its grace: {counts}"
        elif counts["eligible"] == orphans:
            return
        if ended > deadline:
            raise AssertionError(f"the orphans are not due {ended - marked:.0f} s after marking: {counts}")


def assert_first_sight(report: dict[str, Any], played: Played) -> None:
    counts = report["counts"]
    assert counts["deleted"] == counts["eligible"] == 0, report
    assert counts["within_grace"] == len(played.orphans), report
    assert counts["in_scope"] == len(played.kept_staging) + len(played.orphans), report


def test_leak_scenario_sweep_reclaims_exactly_the_orphans(
    played: Played, tq: Any, record_timing: RecordTiming, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = ("sweep", "--config", str(played.config), "--execute", "--json")
    controller_before = controller_id()

    marked = time.monotonic()
    first = tq_gc_in_process(capsys, *sweep)
    record_timing("tq-gc sweep --execute (in process, first sight)", first.seconds)
    assert first.code == 0, first.why()
    report = first.json()
    assert report["outcome"] == "completed" and report["dry_run"] is False, report
    assert_first_sight(report, played)
    assert keys_in(tq, STAGING) == played.kept_staging | played.orphans  # nothing deleted on first sight

    observe_until_due(capsys, played.config, marked, len(played.orphans))
    second = tq_gc(*sweep)
    record_timing("tq-gc sweep --execute (subprocess, deletes)", second.seconds)
    assert second.code == 0, second.why()
    report = second.json()
    counts = report["counts"]
    assert report["outcome"] == "completed", report
    assert counts["deleted"] == counts["eligible"] == len(played.orphans), report
    assert counts["within_grace"] == counts["recheck_saved"] == counts["failed"] == 0, report
    assert counts["in_scope"] == len(played.kept_staging) + len(played.orphans), report
    assert counts["listed"] == counts["in_scope"] + len(played.canonical), report
    assert counts["referenced"] == {
        "admissions": played.held_by(ADMITTED),
        "manifests": 0,  # the checkpoint's manifest was retired on restore
        "tags": played.held_by(TAGGED),
        "owners": 0,
    }, report
    assert {(d["partition"], d["key"]) for d in report["deleted_sample"]} == set(
        played.scenario.fates.orphans
    )

    # TQ's own view: exactly the orphans are gone, referenced rows are whole, rollout_data untouched
    left = keys_in(tq, STAGING)
    assert left == played.kept_staging
    assert not left & played.orphans
    readable = sorted(played.kept_staging)
    rows = tq.kv_batch_get(readable, STAGING)["token_ids_delta"].unbind()  # a jagged nested tensor
    assert [(tuple(row.shape), int(row.abs().sum())) for row in rows] == [((TOKENS,), 0)] * len(readable)
    assert tq.kv_list(CANONICAL)[CANONICAL] == played.canonical
    meta = tq.get_client().kv_retrieve_meta(sorted(played.canonical), CANONICAL, create=False)
    assert list(meta.global_indexes) == played.canonical_indexes
    # the job's controller outlived the CLI: the same actor, still serving
    assert controller_id() == controller_before

    audit = tq_gc("audit", "--config", str(played.config), "--run", report["run_id"], "--json")
    assert audit.code == 0, audit.why()
    audited = audit.json()["deleted"]
    assert sorted((row["partition"], row["key"]) for row in audited) == sorted(played.scenario.fates.orphans)
    assert {row["run_id"] for row in audited} == {report["run_id"]}
    assert all(row["unreferenced_s"] >= GRACE_S for row in audited), audited

    third = tq_gc(*sweep)
    assert third.code == 0, third.why()
    counts = third.json()["counts"]
    assert counts["deleted"] == counts["eligible"] == counts["within_grace"] == 0, counts
    assert counts["in_scope"] == len(played.kept_staging), counts
    assert keys_in(tq, STAGING) == played.kept_staging
    assert controller_id() == controller_before


def test_leak_scenario_dry_run_after_the_grace_deletes_nothing(
    played: Played, tq: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    dry_run = ("sweep", "--config", str(played.config), "--json")
    before = tq.kv_list()

    marked = time.monotonic()
    first = tq_gc_in_process(capsys, *dry_run)
    assert first.code == 0, first.why()
    assert first.json()["outcome"] == "dry_run"
    assert_first_sight(first.json(), played)

    observe_until_due(capsys, played.config, marked, len(played.orphans))
    second = tq_gc(*dry_run)
    assert second.code == 0, second.why()
    report = second.json()
    assert report["outcome"] == "dry_run" and report["dry_run"] is True, report
    assert report["counts"]["eligible"] == len(played.orphans), report
    assert report["counts"]["deleted"] == 0, report
    # A dry run shows its work: the rows it would delete, each one an orphan.
    would_delete = {(row["partition"], row["key"]) for row in report["deleted_sample"]}
    assert would_delete == set(played.scenario.fates.orphans), report
    assert tq.kv_list() == before


def test_cluster_without_tq_exits_2_and_creates_none(
    bare_ray_cluster: Any, redis_url: str, tmp_path: Path, run_python: RunPython
) -> None:
    config = write_config(
        tmp_path / "tq-gc.yaml",
        namespace="no-tq",
        state_url=redis_url,
        transfer_queue={"ray_address": bare_ray_cluster.address},
        scope=[{"partition": STAGING, "all_keys": True}],
    )
    commands = {
        "sweep": ["sweep", "--config", str(config), "--execute", "--json"],
        "check": ["check", "--config", str(config)],
    }
    # both at once: each is mostly interpreter and Ray start-up
    running = {
        name: subprocess.Popen(
            [str(TQ_GC), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
        )
        for name, args in commands.items()
    }
    results = {}
    try:
        for name, process in running.items():
            stdout, stderr = process.communicate(timeout=CLI_TIMEOUT_S)
            results[name] = CliResult(process.returncode, stdout, stderr, 0.0)
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    for name, result in results.items():
        assert result.code == 2, f"{name}: {result.why()}"
        assert CONTROLLER in result.stdout + result.stderr, f"{name}: {result.why()}"
    assert results["sweep"].stdout == ""  # an error is not a report
    assert "never creates one" in results["sweep"].stderr

    code = textwrap.dedent(f"""
        import json, ray
        ray.init(address={bare_ray_cluster.address!r}, log_to_driver=False, logging_level="WARNING")
        print(json.dumps(ray.util.list_named_actors(all_namespaces=True)))
    """)
    listed = run_python(code, timeout_seconds=CLI_TIMEOUT_S)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert json.loads(listed.stdout.strip().splitlines()[-1]) == []  # no controller, no storage unit
