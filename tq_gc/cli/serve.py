"""`tq-gc serve`: the sidecar from a shell. It starts the sidecar actor in the job's Ray cluster (or finds
the one running with this config and these options), streams its log lines, and keeps it until SIGTERM
or SIGINT. How it sweeps beside its config is chosen here: --dry-run, --metrics-port, --change-journal,
and the global --duty-cycle (tq_gc/sidecar/options.py)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from tq_gc.cli.options import config_option, load
from tq_gc.config import Config, schedule_problem
from tq_gc.errors import ConfigError, TqGcError
from tq_gc.sidecar.options import StartOptions
from tq_gc.wiring import Runtime

# How often it checks that the sidecar still answers.
HEALTH_CHECK_SECONDS = 5.0


@click.command()
@config_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="The sidecar's sweeps delete nothing: watch what it would reclaim (reports, metrics) first.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    metavar="N",
    help="Serve Prometheus metrics (tqgc_*) on this port of the node the sidecar runs on (0: any free "
    "port). Without it: no metrics endpoint.",
)
@click.option(
    "--change-journal",
    is_flag=True,
    help="List each swept partition by a change journal installed in the job's TransferQueue controller: "
    "a sweep re-reads only the rows changed since the sidecar's last one (a full listing when the journal "
    "cannot be trusted, and hourly). Removed when the sidecar stops. Off by default.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    config_path: str | None,
    dry_run: bool,
    metrics_port: int | None,
    change_journal: bool,
) -> None:
    """Start the sidecar actor in the job's Ray cluster, and keep it until SIGTERM or SIGINT. Its sweeps
    delete (the sidecar is how tq-gc runs in production) unless --dry-run."""
    config = load(ctx, config_path)
    problem = schedule_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    runtime: Runtime = ctx.obj
    options = StartOptions(
        dry_run=dry_run,
        duty_cycle=runtime.duty_cycle,
        metrics_port=metrics_port,
        change_journal=change_journal,
    )
    serve_forever(config, options, runtime.sidecar_name)


def serve_forever(config: Config, options: StartOptions, name: str) -> None:
    """Start the sidecar `name` (the fixed one, unless a test's) as `options` say, or find it running
    with this config and these options; say where its metrics are, and keep it until SIGTERM/SIGINT. A
    sidecar this process started is owned by it and ends when this returns; one another driver started
    (found running) is left running."""
    import ray

    from tq_gc.sidecar.client import CALL_TIMEOUT_SECONDS, start_sidecar, stop_sidecar

    owns_ray = not ray.is_initialized()
    handle = start_sidecar(
        config,
        dry_run=options.dry_run,
        duty_cycle=options.duty_cycle,
        metrics_port=options.metrics_port,
        change_journal=options.change_journal,
        name=name,
    )
    started_here = True
    stop = threading.Event()
    try:
        with _stopped_by_signals(stop):  # before the announcement: a Ctrl-C right after it stops cleanly
            status = ray.get(handle.status.remote(), timeout=CALL_TIMEOUT_SECONDS)
            started_here = status.get("driver_job_id") == str(ray.get_runtime_context().get_job_id())
            _announce(status, started_here)
            _stream_until(stop, handle, CALL_TIMEOUT_SECONDS)
    finally:
        if started_here:  # one another driver started is that driver's to stop
            stop_sidecar(handle)
        if owns_ray:
            ray.shutdown()


def _announce(status: dict[str, Any], started_here: bool) -> None:
    port = status.get("metrics_port")
    where = f"http://{status.get('node_ip') or '127.0.0.1'}:{port}/metrics" if port else "off"
    stop = (
        "Stop with Ctrl-C or SIGTERM."
        if started_here
        else "Started by another driver, which stops it: Ctrl-C or SIGTERM stops this command only."
    )
    print(
        f"tq-gc sidecar {status['name']!r} (Ray namespace {status['ray_namespace']!r}) running, "
        f"sweeping {status['schedule']}; metrics: {where}. {stop}",
        file=sys.stderr,
        flush=True,
    )


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while inside (their handlers put back after)."""
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stream_until(stop: threading.Event, handle: Any, call_timeout_seconds: float) -> None:
    """Stream the sidecar's log lines until `stop` is set; raise if the actor dies meanwhile (so a
    supervisor notices)."""
    import ray

    def fetch(seen: int) -> tuple[int, list[str]]:
        after, lines = ray.get(handle.log_lines.remote(seen), timeout=call_timeout_seconds)
        return int(after), list(lines)

    seen = 0
    while not stop.wait(HEALTH_CHECK_SECONDS):
        try:
            seen = stream_log_lines(fetch, seen)  # the sidecar's sweeps; and a health check
        except ray.exceptions.RayActorError as exc:
            raise TqGcError(f"the tq-gc sidecar died: {exc}") from exc


def stream_log_lines(fetch: Callable[[int], tuple[int, list[str]]], seen: int) -> int:
    """Print to stderr the sidecar's log lines after the first `seen`; the count seen after them."""
    after, lines = fetch(seen)
    for line in lines:
        click.echo(line, err=True)
    return after


__all__ = ["HEALTH_CHECK_SECONDS", "serve", "serve_forever", "stream_log_lines"]
