"""tq-gc: the command line. Thin: it loads config, builds the stores, calls the collector, prints.
`serve` is serve.py, `check`'s checks checks.py, what the commands share options.py.

Exit codes (docs/operations.md): 0 done, 1 unexpected error, 2 bad usage or config, 3 skipped, 4 aborted.
`--json` prints exactly one JSON document on stdout; logs and progress go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import click

from tq_gc.cli import render
from tq_gc.cli.footprint_view import footprint_summary
from tq_gc.cli.options import DutyCycle, config_option, json_option, load, secret_urls, wide_option
from tq_gc.cli.serve import serve
from tq_gc.cli.sidecar_state import refuse_a_state_out_of_reach
from tq_gc.config import config_schema
from tq_gc.errors import ConfigError, TqGcError
from tq_gc.first_seen import first_seen_ms
from tq_gc.liveness import liveness
from tq_gc.logs import configure_logging
from tq_gc.publish.holders import by_public_name, latest_by_public_name
from tq_gc.redaction import redact_text
from tq_gc.report import DELETED_SAMPLE_SIZE, Outcome
from tq_gc.state.keys import RUNS_KEPT
from tq_gc.sweep.lease import default_holder
from tq_gc.wiring import DEFAULT_DUTY_CYCLE, Runtime, store_series

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_SKIPPED, EXIT_ABORTED = 0, 1, 2, 3, 4
OUTCOME_EXIT = {
    Outcome.COMPLETED: EXIT_OK,
    Outcome.DRY_RUN: EXIT_OK,
    Outcome.SKIPPED: EXIT_SKIPPED,
    Outcome.ABORTED: EXIT_ABORTED,
}
log = logging.getLogger("tq_gc")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    help="DEBUG logs each phase of a sweep.",
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    help="How logs are printed on stderr: text, or json (JSON lines, for cluster log collectors).",
)
@click.option(
    "--duty-cycle",
    type=DutyCycle(),
    help=f"The most of the wall time this process's requests to the job's TransferQueue may take (0 < F "
    f"<= 1; default {DEFAULT_DUTY_CYCLE:g}, a sidecar beside the job's steps; 1, no pauses: a CronJob or a "
    "manual sweep from another node), while the job uses the controller: a job idle for 250 ms gets no "
    "pauses. Used by sweep, serve and demo.",
)
@click.version_option(package_name="tq-gc")
@click.pass_context
def cli(ctx: click.Context, log_level: str, log_format: str, duty_cycle: float | None) -> None:
    """Reclaim orphaned TransferQueue rows, safely. Dry run unless --execute."""
    ctx.ensure_object(Runtime)
    if duty_cycle is not None:
        ctx.obj = replace(ctx.obj, duty_cycle=duty_cycle)
    ctx.meta["log_level"] = log_level.upper()
    ctx.meta["log_format"] = log_format.lower()


cli.add_command(serve)


@cli.command()
@config_option
@click.option("--execute", is_flag=True, help="Really delete. Without it the sweep is a dry run.")
@json_option
@click.option(
    "--max-deletes",
    type=click.IntRange(min=0),
    help="Delete at most N rows this run; never more than limits.max_deletes_per_run (a larger N is "
    "clamped to it, and the report says so).",
)
@click.option(
    "--all-rows",
    is_flag=True,
    help=f"Report every row deleted (dry run: that it would delete), not the first {DELETED_SAMPLE_SIZE}.",
)
@click.option("--pushgateway", metavar="URL", help="Push the sweep's metrics to a Prometheus Pushgateway.")
@click.option(
    "--accept-empty",
    "accept_empty",
    metavar="SOURCE",
    multiple=True,
    help="A reference source that named rows at the last sweep may read as empty this once (repeatable).",
)
@click.pass_context
def sweep(
    ctx: click.Context,
    config_path: str | None,
    execute: bool,
    as_json: bool,
    max_deletes: int | None,
    pushgateway: str | None,
    accept_empty: tuple[str, ...],
    all_rows: bool,
) -> None:
    """One sweep: lease, fence, list, references, plan, re-check, delete, report. A dry run lists the
    rows it would delete, each with how long it is unreferenced, and counts the rows it keeps by reason."""
    if pushgateway:
        secret_urls.append(pushgateway)
    config = load(ctx, config_path)
    runtime: Runtime = ctx.obj
    with (
        runtime.open_sweeper(config, default_holder()) as collector,
        render.progress(live=not as_json) as progress,
    ):
        report = collector.sweep(
            dry_run=not execute,
            max_deletes=max_deletes,
            progress=progress.deletes,
            accept_empty=accept_empty,
            sample_all=all_rows,
            phases=progress.phases,
        )
    # The report first: the sweep is done (it may have deleted rows) whatever becomes of the push, which
    # logs its own failure and never changes the exit code.
    _emit(report.to_dict(), as_json, render.sweep_report)
    if pushgateway:
        from tq_gc.metrics import push_report

        push_report(pushgateway, config.namespace, report, store_series(), config.pressure.headroom_below)
    ctx.exit(OUTCOME_EXIT[report.outcome])


@cli.command()
@config_option
@json_option
@click.option("--runs", default=10, show_default=True, type=click.IntRange(min=1), help="How many runs.")
@wide_option
@click.pass_context
def status(ctx: click.Context, config_path: str | None, as_json: bool, runs: int, wide: bool) -> None:
    """Last runs, the lease holder, rows waiting out their grace."""
    config = load(ctx, config_path)
    refuse_a_state_out_of_reach(ctx.obj, config)
    with ctx.obj.stores(config, need_rows=False) as (state, _):
        now_ms = state.now_ms()
        lease = state.lease_holder()
        waiting = {
            entry.partition: _waiting_summary(first_seen_ms(state.load_first_seen(entry.partition)), now_ms)
            for entry in config.scope
        }
        doc = {
            "namespace": config.namespace,
            "state_url": config.redacted()["state_url"],
            "lease": None
            if lease is None
            else {"holder": lease.holder, "expires_in_s": (lease.expires_at_ms - now_ms) / 1000},
            "fences": {name: (exp - now_ms) / 1000 for name, exp in state.live_fences().items()},
            "waiting": waiting,
            "grace_seconds": config.grace_seconds,
            "runs": state.recent_runs(runs),
            "liveness": liveness(state.recent_runs(RUNS_KEPT), datetime.now(UTC)).to_dict(),
        }
        doc["footprint"] = footprint_summary(doc["runs"])
    _emit(doc, as_json, partial(render.status, wide=wide))


def _waiting_summary(first_seen_ms: Mapping[str, int], now_ms: int) -> dict[str, Any]:
    ages = [now_ms - at_ms for at_ms in first_seen_ms.values()]
    return {"rows": len(ages), "oldest_s": max(ages) / 1000 if ages else 0.0}


@cli.command()
@config_option
@json_option
@click.pass_context
def admissions(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Live admissions and the rows they hold."""
    config = load(ctx, config_path)
    refuse_a_state_out_of_reach(ctx.obj, config)
    with ctx.obj.stores(config, need_rows=False) as (state, _):
        now_ms = state.now_ms()
        doc = {
            "namespace": config.namespace,
            "admissions": by_public_name(state.live_admissions()),
            "expiry": {
                admission_id: {
                    "expires_in_s": (expires_at_ms - now_ms) / 1000,
                    "expires_at": render.utc_iso(expires_at_ms),
                }
                for admission_id, expires_at_ms in latest_by_public_name(state.admission_expiries()).items()
            },
        }
    _emit(doc, as_json, render.admissions)


@cli.command()
@config_option
@click.option("--run", "run_id", help="Only rows deleted by this run.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@json_option
@wide_option
@click.pass_context
def audit(
    ctx: click.Context, config_path: str | None, run_id: str | None, limit: int, as_json: bool, wide: bool
) -> None:
    """Deleted rows, newest first."""
    config = load(ctx, config_path)
    refuse_a_state_out_of_reach(ctx.obj, config)
    with ctx.obj.stores(config, need_rows=False) as (state, _):
        rows = [row.to_dict() for row in state.read_audit(run_id, limit)]
    _emit(
        {"namespace": config.namespace, "run_id": run_id, "deleted": rows},
        as_json,
        partial(render.audit, wide=wide),
    )


@cli.command()
@config_option
@json_option
@click.option("--offline", is_flag=True, help="Only validate the config: reach no store, no Ray, no file.")
@click.pass_context
def check(ctx: click.Context, config_path: str | None, as_json: bool, offline: bool) -> None:
    """Validate config, reach every store and source, touch nothing."""
    from tq_gc.cli.checks import config_checks, run_checks

    config = load(ctx, config_path)
    results = config_checks(config, offline=True) if offline else run_checks(config, ctx.obj)
    _emit({"ok": all(r["ok"] for r in results), "checks": results}, as_json, render.checks)
    ctx.exit(EXIT_OK if all(r["ok"] for r in results) else EXIT_USAGE)


@cli.command()
@click.option(
    "--capacity",
    is_flag=True,
    help="A verl-shaped job on a small TransferQueue: fails without tq-gc, runs 3x as long with it.",
)
@click.option("--record", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.pass_context
def demo(ctx: click.Context, capacity: bool, record: str | None) -> None:
    """The whole story on a local Ray cluster with a real TransferQueue (no Redis, no config)."""
    configure_logging(ctx.meta.get("log_level", "WARNING"), ctx.meta.get("log_format", "text"))
    if capacity:
        from pathlib import Path

        from tq_gc.cli.capacity_demo import run_capacity_demo

        recorded = None if record is None else Path(record)
        ctx.exit(run_capacity_demo(record=recorded, duty_cycle=ctx.obj.duty_cycle))
    from tq_gc.cli.demo import run_demo

    ctx.exit(run_demo(duty_cycle=ctx.obj.duty_cycle))


@cli.group(name="config")
def config_group() -> None:
    """What a config may hold."""


@config_group.command(name="schema")
def config_schema_command() -> None:
    """Print the config's JSON Schema, every field described (docs/configuration.md)."""
    click.echo(json.dumps(config_schema(), indent=2))


def _emit(doc: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        click.echo(json.dumps(doc, default=str))
    else:
        human(doc)


def main(argv: Sequence[str] | None = None, runtime: Runtime | None = None) -> int:
    """Entry point; returns the exit code. Tests call it with a Runtime holding memory stores. No
    secret of a URL it was given is printed, whatever the error (redaction.redact_text)."""
    secret_urls.clear()
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None, obj=runtime or Runtime(), standalone_mode=False
        )
    except click.exceptions.Exit as exit_:
        return int(exit_.exit_code)
    except click.ClickException as exc:
        exc.show()  # usage errors: what was typed, before any URL was read
        return EXIT_USAGE
    except click.Abort:
        return EXIT_ERROR
    except ConfigError as exc:
        click.echo(redact_text(f"error: {exc}", secret_urls), err=True)
        return EXIT_USAGE
    except TqGcError as exc:
        click.echo(redact_text(f"error: {exc}", secret_urls), err=True)
        return EXIT_ERROR
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        click.echo(redact_text(f"unexpected error: {type(exc).__name__}: {exc}", secret_urls), err=True)
        return EXIT_ERROR
    return code if isinstance(code, int) else EXIT_OK


def run() -> None:
    sys.exit(main())


__all__ = ["EXIT_ABORTED", "EXIT_ERROR", "EXIT_OK", "EXIT_SKIPPED", "EXIT_USAGE", "Runtime", "cli", "main"]


if __name__ == "__main__":
    run()
