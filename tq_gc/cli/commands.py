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
from typing import Any

import click

from tq_gc.cli import render
from tq_gc.config import Config, load_config
from tq_gc.errors import ConfigError, TqGcError
from tq_gc.first_seen import first_seen_ms
from tq_gc.logs import configure_logging
from tq_gc.report import Outcome
from tq_gc.stores.transferqueue.claim import claimed
from tq_gc.sweep import Collector
from tq_gc.sweep.lease import default_holder
from tq_gc.wiring import Runtime

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_SKIPPED, EXIT_ABORTED = 0, 1, 2, 3, 4
OUTCOME_EXIT = {
    Outcome.COMPLETED: EXIT_OK,
    Outcome.DRY_RUN: EXIT_OK,
    Outcome.SKIPPED: EXIT_SKIPPED,
    Outcome.ABORTED: EXIT_ABORTED,
}
log = logging.getLogger("tq_gc")


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR.")
@click.version_option(package_name="tq-gc")
@click.pass_context
def cli(ctx: click.Context, log_level: str) -> None:
    """Reclaim orphaned TransferQueue rows, safely. Dry run unless --execute."""
    ctx.ensure_object(Runtime)
    ctx.meta["log_level"] = log_level.upper()


def _load(ctx: click.Context, config_path: str | None, **overrides: Any) -> Config:
    config = load_config(config_path, overrides={k: v for k, v in overrides.items() if v is not None})
    configure_logging(ctx.meta.get("log_level", "INFO"), config.log_format)
    return config


@cli.command()
@_config_option
@click.option("--execute", is_flag=True, help="Really delete. Without it the sweep is a dry run.")
@_json_option
@click.option("--max-deletes", type=click.IntRange(min=0), help="Delete at most N rows this run.")
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
) -> None:
    """One sweep: lease, fence, list, references, plan, re-check, delete, report."""
    config = _load(ctx, config_path)
    runtime: Runtime = ctx.obj
    holder = default_holder()
    with (
        runtime.stores(config) as (state, rows),
        claimed(config, holder, enabled=runtime.row_store is None) as claim,  # the job's TQ's
        render.progress(enabled=not as_json) as progress,
    ):
        assert rows is not None
        report = Collector(config, state, rows, holder, pause_cyclic_gc=True, claim=claim).sweep(
            dry_run=not execute, max_deletes=max_deletes, progress=progress, accept_empty=accept_empty
        )
    # The report first: the sweep is done (it may have deleted rows) whatever becomes of the push, which
    # logs its own failure and never changes the exit code.
    _emit(report.to_dict(), as_json, render.sweep_report)
    if pushgateway:
        from tq_gc.metrics import push_report
        from tq_gc.stores.transferqueue import STORE_SERIES

        push_report(pushgateway, config.namespace, report, STORE_SERIES)
    ctx.exit(OUTCOME_EXIT[report.outcome])


@cli.command()
@_config_option
@_json_option
@click.option("--runs", default=10, show_default=True, type=click.IntRange(min=1), help="How many runs.")
@click.pass_context
def status(ctx: click.Context, config_path: str | None, as_json: bool, runs: int) -> None:
    """Last runs, the lease holder, rows waiting out their grace."""
    config = _load(ctx, config_path)
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
        }
    _emit(doc, as_json, render.status)


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
    with ctx.obj.stores(config, need_rows=False) as (state, _):
        doc = {"namespace": config.namespace, "admissions": state.live_admissions()}
    _emit(doc, as_json, render.admissions)


@cli.command()
@_config_option
@click.option("--run", "run_id", help="Only rows deleted by this run.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@_json_option
@click.pass_context
def audit(ctx: click.Context, config_path: str | None, run_id: str | None, limit: int, as_json: bool) -> None:
    """Deleted rows, newest first."""
    config = _load(ctx, config_path)
    with ctx.obj.stores(config, need_rows=False) as (state, _):
        rows = [row.to_dict() for row in state.read_audit(run_id, limit)]
    _emit({"namespace": config.namespace, "run_id": run_id, "deleted": rows}, as_json, render.audit)


@cli.command()
@_config_option
@_json_option
@click.pass_context
def check(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Validate config, reach every store and source, touch nothing."""
    from tq_gc.cli.checks import run_checks

    config = _load(ctx, config_path)
    results = run_checks(config, ctx.obj)
    _emit({"ok": all(r["ok"] for r in results), "checks": results}, as_json, render.checks)
    ctx.exit(EXIT_OK if all(r["ok"] for r in results) else EXIT_USAGE)


@cli.command()
@_config_option
@click.pass_context
def serve(ctx: click.Context, config_path: str | None) -> None:
    """Start the sidecar actor in the job's Ray cluster, and keep it until SIGTERM or SIGINT."""
    serve_forever(_load(ctx, config_path))


# `tq-gc serve`: how often it checks that the sidecar still answers.
HEALTH_CHECK_SECONDS = 5.0


def serve_forever(config: Config) -> None:
    """Start the sidecar, say where its metrics are, and keep it until SIGTERM/SIGINT. The sidecar is
    owned by this process: it ends when this returns."""
    import ray

    from tq_gc.sidecar.client import CALL_TIMEOUT_SECONDS, start_sidecar, stop_sidecar

    owns_ray = not ray.is_initialized()
    handle = start_sidecar(config)
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

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.wait(HEALTH_CHECK_SECONDS):
            try:
                ray.get(handle.status.remote(), timeout=call_timeout_seconds)
            except ray.exceptions.RayActorError as exc:
                raise TqGcError(f"the tq-gc sidecar died: {exc}") from exc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@cli.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """The whole story on a local Ray cluster with a real TransferQueue (no Redis, no config)."""
    from tq_gc.cli.demo import run_demo

    configure_logging(ctx.meta.get("log_level", "WARNING"), "text")
    ctx.exit(run_demo())


def _emit(doc: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        click.echo(json.dumps(doc, default=str))
    else:
        human(doc)


def main(argv: Sequence[str] | None = None, runtime: Runtime | None = None) -> int:
    """Entry point; returns the exit code. Tests call it with a Runtime holding memory stores."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None, obj=runtime or Runtime(), standalone_mode=False
        )
    except click.exceptions.Exit as exit_:
        return int(exit_.exit_code)
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE
    except click.Abort:
        return EXIT_ERROR
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_USAGE
    except TqGcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_ERROR
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        click.echo(f"unexpected error: {type(exc).__name__}: {exc}", err=True)
        return EXIT_ERROR
    return code if isinstance(code, int) else EXIT_OK


def run() -> None:
    sys.exit(main())


__all__ = ["EXIT_ABORTED", "EXIT_ERROR", "EXIT_OK", "EXIT_SKIPPED", "EXIT_USAGE", "Runtime", "cli", "main"]


if __name__ == "__main__":
    run()
