"""Sweeps with the shared Redis state: the store's clock governs grace, the lease is shared."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tq_gc.cli import EXIT_OK, EXIT_SKIPPED, EXIT_USAGE, main
from tq_gc.config import parse_config
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import Outcome, SweepReport
from tq_gc.state import RedisState
from tq_gc.sweep import Collector
from tq_gc.wiring import Runtime

from support.scripted_store import ScriptedRowStore

STAGING = "rollout_staging"


def config_for(redis_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "namespace": "job-7",
        "state_url": redis_url,
        "scope": [{"partition": STAGING, "all_keys": True}],
        "grace_seconds": 1,
        "allow_short_grace": True,
        "limits": {"max_delete_fraction": 1.0},
        **extra,
    }


def run_cli(tmp_path: Path, config: dict[str, Any], rows: ScriptedRowStore, *args: str) -> tuple[int, Any]:
    path = tmp_path / "gc.yaml"
    path.write_text(yaml.safe_dump(config))
    return main([args[0], "--config", str(path), "--json", *args[1:]], Runtime(row_store=rows)), path


def observe_past_grace(dry_sweep: Callable[[], object], grace_s: float) -> None:
    """Let a grace pass while sweeps keep observing: a gap in observation longer than the grace
    restarts every row's clock (observing every quarter grace leaves most of one to spare)."""
    for _ in range(5):
        time.sleep(grace_s * 0.25)
        dry_sweep()


def test_cli_sweeps_with_redis_state_across_runs(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ScriptedRowStore()
    rows.put(STAGING, "held/c1")
    rows.put(STAGING, "orphan/c1")
    registry = AdmissionRegistry.connect(redis_url, namespace="job-7")
    registry.admit("adm-1", {STAGING: ["held/c1"]}, ttl_seconds=60)
    config = config_for(redis_url)
    assert run_cli(tmp_path, config, rows, "sweep", "--execute")[0] == EXIT_OK
    observe_past_grace(lambda: run_cli(tmp_path, config, rows, "sweep"), config["grace_seconds"])
    capsys.readouterr()
    code, _ = run_cli(tmp_path, config, rows, "sweep", "--execute")
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["counts"]["deleted"], doc["counts"]["referenced"]["admissions"]) == (EXIT_OK, 1, 1)
    assert rows.keys(STAGING) == {"held/c1"}
    registry.close()


def test_host_clock_skew_does_not_shorten_grace(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ScriptedRowStore()
    rows.put(STAGING, "r1/c1")
    config = parse_config(config_for(redis_url, grace_seconds=60, allow_short_grace=False))
    state = RedisState.from_url(redis_url, "job-7")
    Collector(config, state, rows).sweep(dry_run=False)
    day_ns = 86_400 * 10**9
    real_ns, real_s = time.time_ns, time.time
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + day_ns)
    monkeypatch.setattr(time, "time", lambda: real_s() + 86_400)
    report = Collector(config, state, rows).sweep(dry_run=False)
    assert report.counts.within_grace == 1 and report.counts.deleted == 0
    assert rows.keys(STAGING) == {"r1/c1"}
    state.close()


def test_concurrent_sweepers_exactly_one_runs(redis_url: str) -> None:
    """Sidecar, CronJob and a manual CLI firing together: one holds the lease, the others skip."""
    config = parse_config(config_for(redis_url, grace_seconds=2))
    rows = ScriptedRowStore()
    for i in range(20):
        rows.put(STAGING, f"r{i}/c")
    warm = RedisState.from_url(redis_url, "job-7")
    Collector(config, warm, rows).sweep(dry_run=False)
    observe_past_grace(lambda: Collector(config, warm, rows).sweep(dry_run=True), config.grace_seconds)
    started = threading.Barrier(3)
    rows.before("list_keys", lambda: time.sleep(2.0))  # the winner holds the lease while the others try
    reports: list[SweepReport] = []

    def sweeper(name: str) -> None:
        state = RedisState.from_url(redis_url, "job-7")
        started.wait()
        reports.append(Collector(config, state, rows, holder=name).sweep(dry_run=False))
        state.close()

    threads = [threading.Thread(target=sweeper, args=(n,)) for n in ("sidecar", "cronjob", "cli")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    outcomes = sorted(r.outcome.value for r in reports)
    assert outcomes == ["completed", "skipped", "skipped"], [(r.outcome, r.reason) for r in reports]
    assert sum(r.counts.deleted for r in reports) == 20
    assert rows.keys(STAGING) == set()
    warm.close()


def test_lease_held_elsewhere_exits_3_via_cli(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = RedisState.from_url(redis_url, "job-7")
    assert other.acquire_lease("sidecar@head", 30_000) is not None
    code, _ = run_cli(tmp_path, config_for(redis_url), ScriptedRowStore(), "sweep", "--execute")
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["outcome"]) == (EXIT_SKIPPED, Outcome.SKIPPED.value)
    assert "sidecar@head" in doc["reason"]
    other.close()


def test_redis_down_aborts_the_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = ScriptedRowStore()
    rows.put(STAGING, "r1/c1")
    code, _ = run_cli(tmp_path, config_for("redis://:s3cret@127.0.0.1:1/0"), rows, "sweep", "--execute")
    out, err = capsys.readouterr()
    assert code == 4 and json.loads(out)["outcome"] == "aborted"
    assert "s3cret" not in out + err
    assert rows.count("delete_if_unchanged") == 0


def test_check_fails_when_redis_may_evict_the_lease_or_admissions(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    rows = ScriptedRowStore()
    rows.put(STAGING, "r1/c1")
    try:
        client.config_set("maxmemory-policy", "allkeys-lru")
        code, _ = run_cli(tmp_path, config_for(redis_url), rows, "check")
        doc = json.loads(capsys.readouterr().out)
        [policy] = [c for c in doc["checks"] if c["name"] == "state store memory policy"]
        assert (code, policy["ok"]) == (EXIT_USAGE, False)
        assert "allkeys-lru" in policy["detail"] and "noeviction" in policy["detail"]
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.close()
    code, _ = run_cli(tmp_path, config_for(redis_url), rows, "check")
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK and doc["ok"], doc
