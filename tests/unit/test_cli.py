"""The CLI's code path with memory stores handed in: exit codes, --json contract, human output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tq_gc.cli import EXIT_ABORTED, EXIT_OK, EXIT_SKIPPED, EXIT_USAGE, main
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.wiring import Runtime

from support.cli_runner import CliRunner
from support.not_http import not_http_server

STAGING = "rollout_staging"
REPORT_KEYS = {
    "run_id", "namespace", "dry_run", "outcome", "reason", "cause", "started_at", "finished_at",
    "counts", "phases_ms", "deleted_sample", "longest_tq_request", "row_store_identity",
    "bytes", "storage", "warnings", "pacing_ms", "listings",
}  # fmt: skip
COUNT_KEYS = {
    "listed",
    "in_scope",
    "referenced",
    "within_grace",
    "eligible",
    "deleted",
    "recheck_saved",
    "failed",
}


Cli = CliRunner


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path, capsys)


def test_sweep_json_is_one_document_matching_the_contract(cli: Cli) -> None:
    cli.rows.put(STAGING, "r1/c1")
    code, out, _ = cli.run("sweep", "--json")
    doc = json.loads(out)  # raises if there is anything but one JSON document
    assert code == EXIT_OK
    assert set(doc) == REPORT_KEYS and set(doc["counts"]) >= COUNT_KEYS
    assert set(doc["counts"]["referenced"]) == {"admissions", "manifests", "tags", "owners"}
    assert set(doc["phases_ms"]) == {"lease", "attach", "list", "references", "plan", "delete"}
    assert doc["dry_run"] is True and doc["outcome"] == "dry_run" and doc["namespace"] == "job-42"


def test_dry_run_by_default_execute_deletes(cli: Cli) -> None:
    cli.rows.put(STAGING, "r1/c1")
    cli.run("sweep")
    cli.clock.advance(120)
    code, doc = cli.run_json("sweep")
    assert (code, doc["counts"]["eligible"], cli.rows.keys(STAGING)) == (EXIT_OK, 1, {"r1/c1"})
    code, doc = cli.run_json("sweep", "--execute")
    assert (code, doc["outcome"], doc["counts"]["deleted"]) == (EXIT_OK, "completed", 1)
    assert doc["deleted_sample"] == [{"partition": STAGING, "key": "r1/c1", "unreferenced_s": 120.0}]
    assert cli.rows.keys(STAGING) == set()


def test_max_deletes_flag_caps_the_run(cli: Cli) -> None:
    for i in range(3):
        cli.rows.put(STAGING, f"r{i}/c")
    cli.run("sweep")
    cli.clock.advance(120)
    code, doc = cli.run_json("sweep", "--execute", "--max-deletes", "1")
    assert (code, doc["counts"]["deleted"], len(cli.rows.keys(STAGING))) == (EXIT_OK, 1, 2)


def test_held_lease_exits_3(cli: Cli) -> None:
    assert cli.state.acquire_lease("sidecar@node-1", 60_000)
    code, doc = cli.run_json("sweep", "--execute")
    assert (code, doc["outcome"]) == (EXIT_SKIPPED, "skipped")


def test_fence_exits_3(cli: Cli) -> None:
    AdmissionRegistry(cli.state).fence("checkpoint-9", 60)
    assert cli.run_json("sweep")[0] == EXIT_SKIPPED


def test_unparsable_manifest_exits_4_and_deletes_nothing(cli: Cli) -> None:
    cli.rows.put(STAGING, "r1/c1")
    cli.run("sweep")
    cli.clock.advance(120)
    bad = cli.manifest_dir / "step-3" / "gc-manifest.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{ not json")
    code, doc = cli.run_json("sweep", "--execute")
    assert (code, doc["outcome"]) == (EXIT_ABORTED, "aborted")
    assert "gc-manifest.json" in doc["reason"]
    assert cli.rows.keys(STAGING) == {"r1/c1"} and cli.rows.count("delete_if_unchanged") == 0


@pytest.fixture
def not_a_gateway() -> Iterator[str]:
    with not_http_server() as url:
        yield url


def test_a_failed_push_after_deleting_still_prints_the_report_and_exits_by_the_sweep(
    cli: Cli, not_a_gateway: str
) -> None:
    cli.rows.put(STAGING, "r1/c1")
    cli.run("sweep")
    cli.clock.advance(120)
    code, out, _ = cli.run("sweep", "--execute", "--json", "--pushgateway", not_a_gateway)
    doc = json.loads(out)
    assert (code, doc["outcome"], doc["counts"]["deleted"]) == (EXIT_OK, "completed", 1)
    assert cli.rows.keys(STAGING) == set()
    code, out, _ = cli.run("sweep", "--execute", "--pushgateway", "http://[::1")
    assert code == EXIT_OK and "completed" in out


def test_a_failed_push_after_an_aborted_sweep_exits_4(cli: Cli, not_a_gateway: str) -> None:
    bad = cli.manifest_dir / "step-3" / "gc-manifest.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{ not json")
    code, out, _ = cli.run("sweep", "--execute", "--json", "--pushgateway", not_a_gateway)
    assert (code, json.loads(out)["outcome"]) == (EXIT_ABORTED, "aborted")


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"grace_seconds": 10}, "grace_seconds"),
        ({"scope": [{"partition": "rollout_data", "all_keys": True}]}, "protected"),
        ({"scope": [{"partition": STAGING, "prefixes": ["*"]}]}, "all_keys"),
        ({"transfer_queue": {"pacing": {"duty_cycle": 0.5}}}, "--duty-cycle"),
        ({"state_url": "postgres://x"}, "state_url"),
        ({"grace_seconds": "15m"}, "grace_seconds"),
        ({"bogus_key": 1}, "bogus_key"),
        (
            {"protected_partitions": [], "scope": [{"partition": "rollout_data", "all_keys": True}]},
            "protected",
        ),
        ({"grace_seconds": float("inf")}, "grace_seconds"),
        ({"transfer_queue": {"pacing": {"max_deletes_per_second": 1}}}, "--duty-cycle"),
        ({"schedule": {"interval_seconds": 60, "cron": "*/5 * * * *"}}, "schedule"),
        (
            {"tag_references": [{"partition": "d", "key_path": "a..b", "target_partition": STAGING}]},
            "key_path",
        ),
    ],
)
def test_bad_config_exits_2_with_the_field_named(cli: Cli, config: dict[str, Any], needle: str) -> None:
    cli.write_config(**config)
    code, out, err = cli.run("sweep", "--execute")
    assert code == EXIT_USAGE and needle in err and out == ""
    assert cli.rows.calls == []


def test_missing_config_file_exits_2(cli: Cli, tmp_path: Path) -> None:
    code = main(["sweep", "--config", str(tmp_path / "nope.yaml")], Runtime(cli.state, cli.rows))
    assert code == EXIT_USAGE


@pytest.mark.parametrize("argv", [["sweep", "--max-deletes", "-1"], ["sweep", "--bogus"], ["nonsense"]])
def test_bad_usage_exits_2(cli: Cli, argv: list[str]) -> None:
    assert main(argv, Runtime(cli.state, cli.rows)) == EXIT_USAGE


def test_env_overrides_file_and_flags_override_env(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        cli.rows.put(STAGING, f"r{i}/c")
    monkeypatch.setenv("TQGC_LIMITS__MAX_DELETES_PER_RUN", "2")
    cli.run("sweep")
    cli.clock.advance(120)
    _, doc = cli.run_json("sweep", "--execute", "--max-deletes", "1")
    assert doc["counts"]["deleted"] == 1
    _code, doc = cli.run_json("sweep", "--execute")
    assert doc["counts"]["deleted"] == 2


def test_the_installers_own_variables_are_not_config(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TQGC_VENV", "/opt/venv")  # scripts/install.sh's, set in the image
    monkeypatch.setenv("TQGC_EDITABLE", "0")
    assert cli.run("sweep")[0] == EXIT_OK
    monkeypatch.setenv("TQGC_GRACE_SECOND", "900")  # a misspelled config variable is still refused
    code, _, err = cli.run("sweep")
    assert code == EXIT_USAGE and "grace_second: unknown key" in err


def test_status_admissions_audit_and_check(cli: Cli) -> None:
    cli.rows.put(STAGING, "r1/c1")
    cli.rows.put(STAGING, "r2/c1")
    AdmissionRegistry(cli.state).admit("adm-1", {STAGING: ["r2/c1"]}, 600)
    cli.run("sweep")
    cli.clock.advance(120)
    _, swept = cli.run_json("sweep", "--execute")

    _, status = cli.run_json("status")
    assert status["lease"] is None and status["runs"][0]["run_id"] == swept["run_id"]
    assert status["waiting"][STAGING]["rows"] == 0
    _, adm = cli.run_json("admissions")
    assert adm["admissions"] == {"adm-1": {STAGING: ["r2/c1"]}}
    _, audit = cli.run_json("audit", "--run", swept["run_id"])
    assert [(row["key"], row["confirmed"]) for row in audit["deleted"]] == [("r1/c1", True)]
    code, check = cli.run_json("check")
    assert code == EXIT_OK and check["ok"], check


def test_check_fails_on_a_broken_manifest_and_touches_nothing(cli: Cli) -> None:
    bad = cli.manifest_dir / "gc-manifest.json"
    bad.write_text("[")
    cli.rows.put(STAGING, "r1/c1")
    code, doc = cli.run_json("check")
    assert code == EXIT_USAGE and not doc["ok"]
    assert [c["name"] for c in doc["checks"] if not c["ok"]] == ["manifests"]
    assert cli.rows.count("delete_if_unchanged") == 0 and cli.state.load_first_seen(STAGING) == {}


def test_human_output_is_a_readable_table(cli: Cli) -> None:
    cli.rows.put(STAGING, "r1/c1")
    code, out, _ = cli.run("sweep")
    assert code == EXIT_OK
    assert "in scope" in out and "within grace" in out and "dry run" in out


def test_password_never_printed(cli: Cli) -> None:
    cli.write_config(state_url="redis://:hunter2@127.0.0.1:1/0")
    _code, out, err = cli.run("status", "--json")
    assert "hunter2" not in out + err


def test_check_counts_each_scope_partitions_rows_by_their_keys(cli: Cli) -> None:
    for key in ("r1/c1", "r2/c1", "r3/c1"):
        cli.rows.put(STAGING, key)
    code, doc = cli.run_json("check")
    assert code == EXIT_OK, doc
    (row_store,) = [c for c in doc["checks"] if f"{STAGING}: 3 rows" in c["detail"]]
    assert row_store["ok"]
    assert cli.rows.count("list_keys") == 1 and cli.rows.count("list_rows") == 0
