"""tq-gc: the command line. Thin: it loads config, builds the stores, calls the collector, prints.

Exit codes (docs/operations.md): 0 done, 1 unexpected error, 2 bad usage or config, 3 skipped, 4 aborted.
`--json` prints exactly one JSON document on stdout; logs and progress go to stderr.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import click

from tq_gc.cli import render
from tq_gc.cli.footprint_view import footprint_summary
from tq_gc.cli.sidecar_state import refuse_a_state_out_of_reach
from tq_gc.config import Config, config_schema, load_config, schedule_problem
from tq_gc.errors import ConfigError, TqGcError
from tq_gc.first_seen import first_seen_ms
from tq_gc.liveness import liveness
from tq_gc.logs import configure_logging
from tq_gc.publish.holders import by_public_name, latest_by_public_name
from tq_gc.redaction import redact_text
from tq_gc.report import DELETED_SAMPLE_SIZE, Outcome
from tq_gc.state.keys import RUNS_KEPT
from tq_gc.sweep.lease import default_holder
from tq_gc.wiring import Runtime, store_series

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_SKIPPED, EXIT_ABORTED = 0, 1, 2, 3, 4
OUTCOME_EXIT = {
    Outcome.COMPLETED: EXIT_OK,
    Outcome.DRY_RUN: EXIT_OK,
    Outcome.SKIPPED: EXIT_SKIPPED,
    Outcome.ABORTED: EXIT_ABORTED,
}
log = logging.getLogger("tq_gc")
# The URLs this run was given (config, flags): their secrets are hidden in everything it prints.
_secret_urls: list[str] = []


def _config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config",
        "config_path",
        envvar="TQGC_CONFIG",
        type=click.Path(dir_okay=False),
        help="YAML config file (env TQGC_CONFIG). Env TQGC_... overrides it; flags override both.",
    )(func)


def _json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.")(func)


def _wide_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--wide",
        is_flag=True,
        help="Tables as wide as their rows on a terminal too (piped, they always are).",
    )(func)


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
@click.version_option(package_name="tq-gc")
@click.pass_context
def cli(ctx: click.Context, log_level: str, log_format: str) -> None:
    """Reclaim orphaned TransferQueue rows, safely. Dry run unless --execute."""
    ctx.ensure_object(Runtime)
    ctx.meta["log_level"] = log_level.upper()
    ctx.meta["log_format"] = log_format.lower()


def _load(ctx: click.Context, config_path: str | None, **overrides: Any) -> Config:
    config = load_config(config_path, overrides={k: v for k, v in overrides.items() if v is not None})
    _secret_urls.extend(config.secret_urls())
    configure_logging(ctx.meta.get("log_level", "INFO"), ctx.meta.get("log_format", "text"), _secret_urls)
    return config


@cli.command()
@_config_option
@click.option("--execute", is_flag=True, help="Really delete. Without it the sweep is a dry run.")
@_json_option
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
        _secret_urls.append(pushgateway)
    config = _load(ctx, config_path)
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
@_config_option
@_json_option
@click.option("--runs", default=10, show_default=True, type=click.IntRange(min=1), help="How many runs.")
@_wide_option
@click.pass_context
def status(ctx: click.Context, config_path: str | None, as_json: bool, runs: int, wide: bool) -> None:
    """Last runs, the lease holder, rows waiting out their grace."""
    config = _load(ctx, config_path)
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
@_config_option
@_json_option
@click.pass_context
def admissions(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Live admissions and the rows they hold."""
    config = _load(ctx, config_path)
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
@_config_option
@click.option("--run", "run_id", help="Only rows deleted by this run.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@_json_option
@_wide_option
@click.pass_context
def audit(
    ctx: click.Context, config_path: str | None, run_id: str | None, limit: int, as_json: bool, wide: bool
) -> None:
    """Deleted rows, newest first."""
    config = _load(ctx, config_path)
    refuse_a_state_out_of_reach(ctx.obj, config)
    with ctx.obj.stores(config, need_rows=False) as (state, _):
        rows = [row.to_dict() for row in state.read_audit(run_id, limit)]
    _emit(
        {"namespace": config.namespace, "run_id": run_id, "deleted": rows},
        as_json,
        partial(render.audit, wide=wide),
    )


@cli.command()
@_config_option
@_json_option
@click.option("--offline", is_flag=True, help="Only validate the config: reach no store, no Ray, no file.")
@click.pass_context
def check(ctx: click.Context, config_path: str | None, as_json: bool, offline: bool) -> None:
    """Validate config, reach every store and source, touch nothing."""
    from tq_gc.cli.checks import config_checks, run_checks

    config = _load(ctx, config_path)
    results = config_checks(config, offline=True) if offline else run_checks(config, ctx.obj)
    _emit({"ok": all(r["ok"] for r in results), "checks": results}, as_json, render.checks)
    ctx.exit(EXIT_OK if all(r["ok"] for r in results) else EXIT_USAGE)


@cli.command()
@_config_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="The sidecar's sweeps delete nothing: watch what it would reclaim (reports, metrics) first.",
)
@click.pass_context
def serve(ctx: click.Context, config_path: str | None, dry_run: bool) -> None:
    """Start the sidecar actor in the job's Ray cluster, and keep it until SIGTERM or SIGINT. Its sweeps
    delete (the sidecar is how tq-gc runs in production) unless --dry-run."""
    config = _load(ctx, config_path)
    problem = schedule_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    serve_forever(config, dry_run=dry_run)


# `tq-gc serve`: how often it checks that the sidecar still answers.
HEALTH_CHECK_SECONDS = 5.0


def serve_forever(config: Config, dry_run: bool = False) -> None:
    """Start the sidecar (its sweeps dry runs if `dry_run`), say where its metrics are, and keep it until
    SIGTERM/SIGINT. The sidecar is owned by this process: it ends when this returns."""
    import ray

    from tq_gc.sidecar.client import CALL_TIMEOUT_SECONDS, start_sidecar, stop_sidecar

    owns_ray = not ray.is_initialized()
    handle = start_sidecar(config, dry_run=dry_run)
    try:
        _announce(ray.get(handle.status.remote(), timeout=CALL_TIMEOUT_SECONDS))
        _wait_for_signal(handle, CALL_TIMEOUT_SECONDS)
    finally:
        stop_sidecar(handle)
        if owns_ray:
            ray.shutdown()


def _announce(status: dict[str, Any]) -> None:
    port = status.get("metrics_port")
    where = f"http://{status.get('node_ip') or '127.0.0.1'}:{port}/metrics" if port else "off"
    print(
        f"tq-gc sidecar {status['name']!r} (Ray namespace {status['ray_namespace']!r}) running, "
        f"sweeping {status['schedule']}; metrics: {where}. Stop with Ctrl-C or SIGTERM.",
        file=sys.stderr,
        flush=True,
    )


def _wait_for_signal(handle: Any, call_timeout_seconds: float) -> None:
    """Block until SIGTERM or SIGINT; raise if the actor dies meanwhile (so a supervisor notices)."""
    import ray

    def fetch(seen: int) -> tuple[int, list[str]]:
        after, lines = ray.get(handle.log_lines.remote(seen), timeout=call_timeout_seconds)
        return int(after), list(lines)

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    seen = 0
    try:
        while not stop.wait(HEALTH_CHECK_SECONDS):
            try:
                seen = stream_log_lines(fetch, seen)  # the sidecar's sweeps; and a health check
            except ray.exceptions.RayActorError as exc:
                raise TqGcError(f"the tq-gc sidecar died: {exc}") from exc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stream_log_lines(fetch: Callable[[int], tuple[int, list[str]]], seen: int) -> int:
    """Print to stderr the sidecar's log lines after the first `seen`; the count seen after them."""
    after, lines = fetch(seen)
    for line in lines:
        click.echo(line, err=True)
    return after


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

        ctx.exit(run_capacity_demo(record=None if record is None else Path(record)))
    from tq_gc.cli.demo import run_demo

    ctx.exit(run_demo())


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
    _secret_urls.clear()
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
        click.echo(redact_text(f"error: {exc}", _secret_urls), err=True)
        return EXIT_USAGE
    except TqGcError as exc:
        click.echo(redact_text(f"error: {exc}", _secret_urls), err=True)
        return EXIT_ERROR
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        click.echo(redact_text(f"unexpected error: {type(exc).__name__}: {exc}", _secret_urls), err=True)
        return EXIT_ERROR
    return code if isinstance(code, int) else EXIT_OK


def run() -> None:
    sys.exit(main())


__all__ = ["EXIT_ABORTED", "EXIT_ERROR", "EXIT_OK", "EXIT_SKIPPED", "EXIT_USAGE", "Runtime", "cli", "main"]


if __name__ == "__main__":
    run()
