"""Nothing the CLI is asked to do is silently ignored: a bad log level, a clamped --max-deletes, a
schedule that cannot reclaim, a memory:// state the CLI cannot see, a config checked offline."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tq_gc.cli import EXIT_OK, EXIT_USAGE, demo, main, serve
from tq_gc.config import Config
from tq_gc.sidecar.options import StartOptions
from tq_gc.stores import RowStore
from tq_gc.wiring import DEFAULT_DUTY_CYCLE, Runtime, StoreOptions

from support.cli_runner import STAGING, CliRunner


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[CliRunner]:
    yield CliRunner(tmp_path, capsys)
    logging.getLogger("tq_gc").setLevel(logging.WARNING)


# --log-level --------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["foo", "verbose", "10"])
def test_an_unknown_log_level_is_a_usage_error_listing_the_choices(cli: CliRunner, level: str) -> None:
    code, out, err = cli.run_argv("--log-level", level, "sweep", "--config", str(cli.config_path))
    assert code == EXIT_USAGE and out == ""
    assert all(choice in err.lower() for choice in ("debug", "info", "warning", "error"))
    assert "unexpected error" not in err and cli.rows.calls == []


def test_the_log_level_takes_any_case(cli: CliRunner) -> None:
    code, _, _ = cli.run_argv("--log-level", "warning", "sweep", "--config", str(cli.config_path))
    assert code == EXIT_OK


def test_debug_logs_each_phase_of_the_sweep(cli: CliRunner) -> None:
    cli.rows.put(STAGING, "r1/c1")
    code, _, err = cli.run_argv("--log-level", "DEBUG", "sweep", "--config", str(cli.config_path))
    assert code == EXIT_OK
    for phase in ("lease", "attach", "list", "references", "plan"):
        assert f"phase {phase}" in err, err


# --log-format -------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_format", ["yaml", "JSONL", ""])
def test_an_unknown_log_format_is_a_usage_error_listing_the_choices(cli: CliRunner, log_format: str) -> None:
    code, out, err = cli.run_argv("--log-format", log_format, "sweep", "--config", str(cli.config_path))
    assert code == EXIT_USAGE and out == ""
    assert "--log-format" in err and "text" in err and "json" in err
    assert "unexpected error" not in err and cli.rows.calls == []


def test_log_format_json_logs_json_lines_on_stderr(cli: CliRunner) -> None:
    argv = ("--log-level", "DEBUG", "--log-format", "json", "sweep", "--config", str(cli.config_path))
    code, _, err = cli.run_argv(*argv)
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert code == EXIT_OK and lines
    assert any("phase list" in line["msg"] for line in lines), lines


def test_logs_are_text_by_default(cli: CliRunner) -> None:
    code, _, err = cli.run_argv("--log-level", "DEBUG", "sweep", "--config", str(cli.config_path))
    assert code == EXIT_OK and "phase list" in err
    assert not err.lstrip().startswith("{"), err


# --max-deletes above the config's cap -------------------------------------------------------------


def test_the_help_says_max_deletes_is_capped_by_the_config(cli: CliRunner) -> None:
    _, out, _ = cli.run_argv("sweep", "--help")
    assert "max_deletes_per_run" in " ".join(out.split())


def test_a_max_deletes_above_the_cap_is_clamped_and_the_report_says_so(cli: CliRunner) -> None:
    cli.write_config(limits={"max_deletes_per_run": 7, "max_delete_fraction": 1.0})
    code, doc = cli.run_json("sweep", "--max-deletes", str(10**30))
    assert code == EXIT_OK
    [warning] = [w for w in doc["warnings"] if w["kind"] == "max_deletes_clamped"]
    assert str(10**30) in warning["message"] and "max_deletes_per_run=7" in warning["message"]
    _, out, _ = cli.run("sweep", "--max-deletes", "100")
    assert "max_deletes_per_run=7" in " ".join(out.split())


def test_a_max_deletes_within_the_cap_warns_of_nothing(cli: CliRunner) -> None:
    cli.rows.put(STAGING, "r1/c1")
    _, doc = cli.run_json("sweep", "--max-deletes", "3")
    assert doc["warnings"] == []


# a schedule that cannot reclaim, in check and serve -----------------------------------------------


def test_check_fails_a_schedule_that_cannot_reclaim(cli: CliRunner) -> None:
    cli.write_config(grace_seconds=5, allow_short_grace=True, schedule={"interval_seconds": 3600})
    code, doc = cli.run_json("check")
    assert code == EXIT_USAGE
    [line] = [c for c in doc["checks"] if c["name"] == "schedule"]
    assert not line["ok"] and "3600" in line["detail"] and "grace_seconds=5" in line["detail"]


def test_serve_refuses_a_schedule_that_cannot_reclaim(cli: CliRunner) -> None:
    cli.write_config(grace_seconds=5, allow_short_grace=True, schedule={"interval_seconds": 3600})
    code, _, err = cli.run("serve")
    assert code == EXIT_USAGE and "3600" in err and "grace_seconds=5" in err


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        ((), StartOptions()),
        (("--dry-run",), StartOptions(dry_run=True)),
        (("--metrics-port", "9464"), StartOptions(metrics_port=9464)),
        (("--metrics-port", "0"), StartOptions(metrics_port=0)),
        (("--change-journal",), StartOptions(change_journal=True)),
    ],
)
def test_serve_starts_the_sidecar_as_its_command_line_says(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], options: StartOptions
) -> None:
    """Whether the sidecar deletes, and where it serves its metrics, are chosen where it is started, as
    `sweep --execute` chooses for one sweep (the sidecar's own start is tests/integration/sidecar/)."""
    started: list[StartOptions] = []
    monkeypatch.setattr(serve, "serve_forever", lambda _config, how, _name: started.append(how))
    code, _, err = cli.run("serve", *argv)
    assert code == EXIT_OK, err
    assert started == [options]
    _, help_text, _ = cli.run_argv("serve", "--help")
    assert "--dry-run" in help_text and "--metrics-port" in help_text and "--change-journal" in help_text


def test_a_one_shot_sweep_takes_no_change_journal(cli: CliRunner) -> None:
    """The journal's gain is the listing kept from the last sweep of the same process: none for one sweep."""
    code, out, err = cli.run("sweep", "--change-journal")
    assert code == EXIT_USAGE and out == "" and "--change-journal" in err


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_bad_metrics_port_is_a_usage_error(cli: CliRunner, port: str) -> None:
    code, _, err = cli.run("serve", "--metrics-port", port)
    assert code == EXIT_USAGE and "--metrics-port" in err and "unexpected error" not in err


# --duty-cycle: how hard this process presses on the job's TransferQueue ---------------------------


@pytest.mark.parametrize("duty", ["0", "-0.5", "1.5", "nan", "inf", "fast"])
def test_a_duty_cycle_outside_zero_to_one_is_a_usage_error(cli: CliRunner, duty: str) -> None:
    code, out, err = cli.run_argv("--duty-cycle", duty, "sweep", "--config", str(cli.config_path))
    assert code == EXIT_USAGE and out == ""
    assert "--duty-cycle" in err and "above 0 and at most 1" in err, err
    assert "unexpected error" not in err and cli.rows.calls == []


@pytest.mark.parametrize(("argv", "duty"), [((), DEFAULT_DUTY_CYCLE), (("--duty-cycle", "1"), 1.0)])
def test_the_duty_cycle_reaches_the_row_store_the_sweep_attaches(
    cli: CliRunner, argv: tuple[str, ...], duty: float
) -> None:
    attached: list[StoreOptions] = []

    def attach(_config: Config, options: StoreOptions) -> RowStore:
        attached.append(options)
        return cli.rows

    cli.capsys.readouterr()
    runtime = Runtime(cli.state, row_store_factory=attach)
    code = main([*argv, "sweep", "--config", str(cli.config_path)], runtime)
    assert code == EXIT_OK, cli.capsys.readouterr().err
    assert attached == [StoreOptions(duty_cycle=duty, change_journal=False)]


def test_serve_and_demo_take_the_duty_cycle_too(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[StartOptions] = []
    monkeypatch.setattr(serve, "serve_forever", lambda _config, how, _name: started.append(how))
    code, _, err = cli.run_argv("--duty-cycle", "1", "serve", "--config", str(cli.config_path))
    assert code == EXIT_OK, err
    assert started == [StartOptions(duty_cycle=1.0)]

    demos: list[float] = []
    monkeypatch.setattr(demo, "run_demo", lambda duty_cycle: demos.append(duty_cycle) or 0)
    code, _, err = cli.run_argv("--duty-cycle", "0.5", "demo")
    assert code == EXIT_OK, err
    assert demos == [0.5]
    _, help_text, _ = cli.run_argv("--help")
    assert "--duty-cycle" in help_text


def test_a_schedule_that_cannot_reclaim_is_refused_at_load(cli: CliRunner) -> None:
    cli.write_config(grace_seconds=60, schedule={"interval_seconds": 300})
    code, _, err = cli.run("sweep")
    assert code == EXIT_USAGE and "300" in err and "grace_seconds=60" in err


# memory:// state: it lives in the sidecar ---------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "admissions", "audit"])
def test_a_memory_state_is_said_to_live_in_the_sidecar(cli: CliRunner, command: str) -> None:
    cli.write_config(state_url="memory://")
    code, out, err = cli.run(command, runtime=Runtime())
    assert code == EXIT_USAGE and out == ""
    assert "memory://" in err and "sidecar" in err and "'tq-gc'" in err and "'tq_gc'" in err
    assert "redis://" in err


# check --offline ------------------------------------------------------------------------------------


def test_check_offline_validates_without_reaching_any_store(cli: CliRunner) -> None:
    cli.write_config(state_url="redis://127.0.0.1:1/0")  # nothing listens there
    code, doc = cli.run_json("check", "--offline")
    assert code == EXIT_OK and doc["ok"], doc
    assert cli.rows.calls == []
    assert {c["name"] for c in doc["checks"]} >= {"config", "schedule"}


def test_check_offline_refuses_a_bad_config(cli: CliRunner) -> None:
    cli.write_config(grace_second=900)
    code, _, err = cli.run("check", "--offline")
    assert code == EXIT_USAGE and "did you mean 'grace_seconds'?" in err


def test_check_offline_needs_no_runtime(cli: CliRunner, capsys: pytest.CaptureFixture[str]) -> None:
    cli.write_config(state_url="redis://127.0.0.1:1/0", transfer_queue={"ray_address": "ray://nowhere:1"})
    assert main(["check", "--offline", "--config", str(cli.config_path)]) == EXIT_OK
    assert "offline" in capsys.readouterr().out


# a dry run that shows its work ------------------------------------------------------------------


def orphans(cli: CliRunner, count: int) -> list[str]:
    """`count` unreferenced rows, seen once and then past their grace."""
    keys = [f"r{i:03d}/call0" for i in range(count)]
    for key in keys:
        cli.rows.put(STAGING, key)
    assert cli.run("sweep")[0] == EXIT_OK
    cli.clock.advance(120)
    return keys


def test_a_dry_run_reports_the_rows_it_would_delete_with_why(cli: CliRunner) -> None:
    keys = orphans(cli, 3)
    code, doc = cli.run_json("sweep")
    assert code == EXIT_OK and doc["outcome"] == "dry_run"
    assert sorted(row["key"] for row in doc["deleted_sample"]) == keys
    assert all(row["partition"] == STAGING and row["unreferenced_s"] >= 120 for row in doc["deleted_sample"])
    assert cli.rows.keys(STAGING) == set(keys)  # a dry run deletes nothing


def test_a_dry_run_lists_a_bounded_sample_by_default_and_all_on_request(cli: CliRunner) -> None:
    keys = orphans(cli, 25)
    _, doc = cli.run_json("sweep")
    assert len(doc["deleted_sample"]) == 20 and doc["counts"]["eligible"] == 25
    _, doc = cli.run_json("sweep", "--all-rows")
    assert sorted(row["key"] for row in doc["deleted_sample"]) == keys


def test_a_dry_run_prints_the_rows_it_would_delete_and_the_kept_counts(cli: CliRunner) -> None:
    keys = orphans(cli, 2)
    cli.rows.put(STAGING, "r999/late")  # first seen now: kept for its grace
    code, out, _ = cli.run("sweep")
    assert code == EXIT_OK
    assert (
        "would delete" in out and all(key in out for key in keys) and "r999/late" not in out.split("would")[1]
    )
    assert "kept: within grace" in out and "unreferenced for" in out


# tables that can be copied ---------------------------------------------------------------------------


LONG_KEY = "__generation_cut__/ckpt-000123/" + "r7_g0_a1-" * 8 + "call3/0"


def deleted_long_key(cli: CliRunner) -> str:
    cli.rows.put(STAGING, LONG_KEY)
    cli.run("sweep")
    cli.clock.advance(120)
    _, doc = cli.run_json("sweep", "--execute")
    assert doc["counts"]["deleted"] == 1
    return str(doc["run_id"])


def test_audit_and_status_never_cut_ids_when_piped(cli: CliRunner) -> None:
    run_id = deleted_long_key(cli)
    _, out, _ = cli.run("audit")
    assert LONG_KEY in out and run_id in out
    _, out, _ = cli.run("status")
    assert run_id in out


@pytest.mark.parametrize("wide", [[], ["--wide"]])
def test_audit_never_cuts_ids_on_a_narrow_terminal(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch, wide: list[str]
) -> None:
    run_id = deleted_long_key(cli)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = cli.run("audit", *wide)
    assert LONG_KEY in out and run_id in out
    _, out, _ = cli.run("status", *wide)
    assert run_id in out


def test_check_says_how_often_a_cronjob_must_sweep(cli: CliRunner) -> None:
    cli.write_config(grace_seconds=60)
    cli.rows.put(STAGING, "r1/c1")
    code, doc = cli.run_json("check")
    assert code == EXIT_OK, doc
    [line] = [c for c in doc["checks"] if c["name"] == "schedule"]
    assert line["ok"] and "every 30 s" in line["detail"]


# a scope partition that does not exist ------------------------------------------------------------


def test_a_misspelled_scope_partition_fails_check_and_warns_in_each_sweep(cli: CliRunner) -> None:
    cli.rows.put(STAGING, "r1/c1")
    cli.write_config(scope=[{"partition": "rollout_stagin", "all_keys": True}])
    code, doc = cli.run_json("check")
    assert code == EXIT_USAGE
    [failed] = [c for c in doc["checks"] if not c["ok"]]
    assert failed["name"] == "scope partition rollout_stagin"
    assert "'rollout_stagin' does not exist" in failed["detail"] and STAGING in failed["detail"]
    assert f"did you mean {STAGING!r}?" in failed["detail"]
    for _ in range(2):
        code, doc = cli.run_json("sweep")
        assert code == EXIT_OK
        [warning] = doc["warnings"]
        assert warning["kind"] == "scope_partition_missing" and "'rollout_stagin'" in warning["message"]
        assert f"did you mean {STAGING!r}?" in warning["message"]
    assert cli.rows.keys(STAGING) == {"r1/c1"}


def test_a_partition_the_job_has_not_written_yet_passes_check_and_is_warned_of(cli: CliRunner) -> None:
    """verl's val before its first validation: no name close to it exists, so it reads as not written
    yet, not as a typo. `check` passes, saying it is swept once the job writes it; a sweep warns."""
    cli.rows.put(STAGING, "r1/c1")
    cli.write_config(scope=[{"partition": STAGING, "all_keys": True}, {"partition": "val", "all_keys": True}])
    code, doc = cli.run_json("check")
    assert code == EXIT_OK, doc
    checks = {c["name"]: c for c in doc["checks"]}
    assert "val: not created yet" in checks["row store"]["detail"]
    line = checks["scope partition val"]
    assert (
        line["ok"]
        and "not created yet" in line["detail"]
        and "swept once the job writes it" in line["detail"]
    )
    assert "did you mean" not in line["detail"] and "created_by_stack" not in json.dumps(doc)
    assert f"scope partition {STAGING}" not in checks  # an existing one is only counted, in the row store's
    code, doc = cli.run_json("sweep")
    assert code == EXIT_OK
    [warning] = doc["warnings"]
    assert warning["kind"] == "scope_partition_missing" and "'val'" in warning["message"]
    assert "did you mean" not in warning["message"]


@pytest.mark.parametrize("command", ["check", "sweep"])
def test_the_removed_created_by_stack_is_a_config_error_saying_what_replaces_it(
    cli: CliRunner, command: str
) -> None:
    cli.write_config(scope=[{"partition": "val", "all_keys": True, "created_by_stack": True}])
    code, out, err = cli.run(command)
    assert code == EXIT_USAGE and out == ""
    assert "scope.0.created_by_stack" in err and "swept as empty" in err and "delete the key" in err, err
    assert cli.rows.calls == []


def test_before_the_jobs_first_write_check_passes_its_scope_lines(cli: CliRunner) -> None:
    """No partition at all: nothing is a typo of anything yet, so every scope line passes, and says that a
    name that never appears is never swept (the sweep's warning keeps saying it)."""
    cli.write_config(scope=[{"partition": STAGING, "all_keys": True}, {"partition": "val", "all_keys": True}])
    code, doc = cli.run_json("check")
    scope_lines = [c for c in doc["checks"] if c["name"].startswith("scope partition ")]
    assert [c["name"] for c in scope_lines] == [f"scope partition {STAGING}", "scope partition val"]
    for line in scope_lines:
        assert line["ok"] and "a name that never appears is never swept" in line["detail"], line
    assert code == EXIT_OK, doc


# sweeps further apart than the grace (a CronJob's schedule tq-gc does not know) ---------------------


def test_a_gap_between_sweeps_over_the_grace_is_a_warning_naming_both_numbers(cli: CliRunner) -> None:
    cli.rows.put(STAGING, "r1/c1")
    assert cli.run_json("sweep")[1]["warnings"] == []
    cli.clock.advance(300)
    _, doc = cli.run_json("sweep")
    [warning] = doc["warnings"]
    assert warning["kind"] == "sweep_gap_over_grace"
    assert "300 s" in warning["message"] and "grace_seconds=120" in warning["message"]
    cli.clock.advance(60)
    assert cli.run_json("sweep")[1]["warnings"] == []


# admissions: each with its TTL and expiry -----------------------------------------------------------


def test_admissions_show_each_ones_time_left_and_expiry(cli: CliRunner) -> None:
    cli.state.admit("adm-long", {STAGING: ["r1/c1"]}, ttl_ms=600_000)
    cli.state.admit("adm-short", {STAGING: ["r2/c1"]}, ttl_ms=30_000)
    cli.clock.advance(10)
    _, doc = cli.run_json("admissions")
    expiry = doc["expiry"]
    assert expiry["adm-long"]["expires_in_s"] == 590 and expiry["adm-short"]["expires_in_s"] == 20
    assert expiry["adm-long"]["expires_at"].endswith("+00:00")
    _, out, _ = cli.run("admissions")
    assert "expires in" in out and "590" in out and expiry["adm-short"]["expires_at"][:19] in out


# progress: each phase with its own count --------------------------------------------------------------


def test_off_a_terminal_each_phase_logs_a_line_with_its_count_and_rate(cli: CliRunner) -> None:
    keys = orphans(cli, 3)
    code, _, err = cli.run("sweep", "--execute")
    assert code == EXIT_OK
    lines = err.splitlines()
    [listed] = [line for line in lines if "phase list" in line]
    assert "3 rows" in listed and "rows/s" in listed
    [deleted] = [line for line in lines if "phase delete" in line]
    assert f"{len(keys)} rows" in deleted and "rows/s" in deleted
    assert all(any(f"phase {p}" in line for line in lines) for p in ("lease", "attach", "references", "plan"))


def test_json_keeps_stdout_to_the_report_and_phases_on_stderr(cli: CliRunner) -> None:
    orphans(cli, 2)
    code, out, err = cli.run("sweep", "--json")
    assert code == EXIT_OK and json.loads(out)["outcome"] == "dry_run"
    assert "phase list" in err


def test_on_a_terminal_each_phase_is_shown_with_its_count(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    orphans(cli, 3)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    code, _, err = cli.run("sweep", "--execute")
    assert code == EXIT_OK
    assert "listed 3 rows" in err and "deleted 3 rows" in err
    assert "0/?" not in err
