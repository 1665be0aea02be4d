"""The sidecar: a Ray actor inside the training job's cluster that sweeps on a schedule.

    handle = tq_gc.start_sidecar(config)          # from the training script (idempotent)
    tq-gc serve --config gc.yaml                  # or from a shell, until SIGTERM
    registry = sidecar_registry()                 # publishers: admit/renew/release through the actor

This module is the actor; tq_gc/sidecar/client.py starts, finds and stops it.

Inside the actor an APScheduler 3 BackgroundScheduler runs one job, the sweep, on `schedule`
(interval or cron); `sweep_now()` runs one on demand. A lock keeps the two apart:
never two sweeps at once in one sidecar (across sweepers, the state store's lease does that). A sweep
that raises is logged and counted (`tqgc_sweep_errors_total`), and the schedule goes on.

Lifetime: the actor is *not* detached. It is owned by the driver that starts it (the training script,
or `tq-gc serve`) and dies with it, like the job's TransferQueue controller, which is not detached
either: a detached sidecar would outlive the job and keep sweeping a TQ that no longer exists. It is
not restarted by Ray either (max_restarts=0). One started again under its name (start_sidecar after it
died) comes back, with `memory://` state, without the admissions publishers recorded in it: their
clients find it by name and admit again what they hold within their renewal period (at most a third of
the grace), and it deletes nothing for a grace after its first sweep, its first-seen records having
started empty with it (tq_gc/sidecar/client.py, SidecarAdmissionBackend).

One state store per TQ: with memory:// the state lives in this actor, so a second sidecar (one started
under another name, as tests do, or beside a live one) has a lease and registry of its own. Each executing
sweep holds the job's TQ's claim for this sidecar's state (stores/claims.py), which its
row store owns: a sidecar of another state finds it held and its sweeps are skipped (tq_claimed), nothing
deleted, until this one shuts down or dies.

The actor is threaded (max_concurrency): status(), admit() and friends are served while a sweep runs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import ray
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from tq_gc.config import Config, Schedule
from tq_gc.errors import ConfigError, StoreUnavailable, TqGcError
from tq_gc.liveness import liveness
from tq_gc.logs import RecentLines, configure_logging
from tq_gc.metrics import SweepMetrics
from tq_gc.publish.registry import checked_name, checked_rows, checked_whole_ms
from tq_gc.report import Cause, SweepReport
from tq_gc.sidecar.names import SIDECAR_NAME, SIDECAR_RAY_NAMESPACE
from tq_gc.sidecar.options import DEFAULT_START, StartOptions
from tq_gc.sidecar.pressure import FIXED_PRESSURE_TIMING, PressureTiming, PressureWatch
from tq_gc.state.base import AdmissionRows
from tq_gc.state.keys import RUNS_KEPT
from tq_gc.stores import attach_transfer_queue, import_transfer_queue_soon, transfer_queue_importing
from tq_gc.stores.claims import sidecar_holder
from tq_gc.sweep.clocks import utc_now_iso
from tq_gc.sweep.lease import default_holder
from tq_gc.wiring import RowStoreFactory, Runtime, store_series

log = logging.getLogger(__name__)

REPORTS_KEPT = 10
SWEEP_JOB_ID = "sweep"
PRESSURE_JOB_ID = "pressure"


class SidecarActor:
    """The actor's body: `start_sidecar` applies `ray.remote` to it with its resource ask."""

    def __init__(
        self,
        config: Config,
        row_store_factory: RowStoreFactory | None = None,
        pressure_timing: PressureTiming = FIXED_PRESSURE_TIMING,
        options: StartOptions = DEFAULT_START,
        name: str = SIDECAR_NAME,
    ) -> None:
        """`pressure_timing`: the fixed values, unless a test sets its own. `options`: how it was started
        (start_sidecar's keywords, `tq-gc serve`'s options): with dry_run, every sweep of this sidecar,
        scheduled or on demand, is a dry run. `name`: its actor's name, for what it says."""
        self._log_lines = RecentLines()  # what `tq-gc serve` streams (log_lines)
        configure_logging("INFO", "text", config.secret_urls(), self._log_lines)
        self._config = config
        self._options = options
        self._dry_run = options.dry_run
        self._name = name
        self._whereabouts = _whereabouts()
        self._pressure_timing = pressure_timing
        self._closing = ExitStack()  # everything this actor opened, closed in reverse by shutdown()
        self._sweep_lock = threading.Lock()
        self._reports: deque[dict[str, Any]] = deque(maxlen=REPORTS_KEPT)
        # The run summaries liveness reads, newest first as the state store keeps them (read at first sweep)
        self._liveness_runs: deque[dict[str, Any]] | None = None
        self._last_error: dict[str, Any] | None = None
        self._last_sweep_at: float | None = None  # time.monotonic() when the last sweep started
        self._closed = False
        try:
            self._open(row_store_factory or attach_transfer_queue)
        except BaseException:
            self._closing.close()
            raise
        log.info("tq-gc sidecar %r up: %s", name, self._describe_schedule())

    def _open(self, row_store_factory: RowStoreFactory) -> None:
        config = self._config
        # The TQ is attached at the first sweep, not here: the job may create it after the sidecar.
        if row_store_factory is attach_transfer_queue:
            import_transfer_queue_soon()
        runtime = Runtime(
            row_store_factory=row_store_factory,
            duty_cycle=self._options.duty_cycle,
            change_journal=self._options.change_journal,
        )
        holder = sidecar_holder(self._name, default_holder())
        # The TQ's claim is held from the first executing sweep that reaches the TQ until the row store
        # closes at shutdown, after the sweep stopped (or this process's death, which Ray ends it with).
        self._collector = self._closing.enter_context(
            runtime.open_sweeper(config, holder, missing_queue_is_transient=True)
        )
        self._state = self._collector.state
        self._metrics = SweepMetrics(store=store_series(), pressure_below=config.pressure.headroom_below)
        self._metrics_port = self._serve_metrics(self._options.metrics_port)
        self._scheduler = self._start_scheduler(config.schedule)
        self._watch_pressure()

    def _watch_pressure(self) -> None:
        """With pressure.headroom_below set, check the storage's headroom every check_seconds of the
        pressure timing, in the scheduler's one worker thread (so never beside a sweep): pressure.py."""
        pressure, timing = self._config.pressure, self._pressure_timing
        if pressure.headroom_below is None:
            return
        watch = PressureWatch(
            pressure,
            self._collector.row_store.storage_fill,
            self._scheduled_sweep,
            lambda: self._last_sweep_at,
            self._metrics.footprint.observe_pressure,
            interval_seconds=timing.interval_seconds,
        )
        self._scheduler.add_job(
            watch.check,
            IntervalTrigger(seconds=timing.check_seconds, timezone=UTC),
            id=PRESSURE_JOB_ID,
            max_instances=1,
            coalesce=True,
        )

    def _serve_metrics(self, port: int | None) -> int | None:
        if port is None:
            return None
        server, bound = self._metrics.serve_http(port)
        self._closing.callback(server.server_close)
        self._closing.callback(server.shutdown)
        return bound

    def _start_scheduler(self, schedule: Schedule) -> BackgroundScheduler:
        # One worker thread: sweeps are serial anyway, and max_instances=1 makes a tick that comes
        # while the previous sweep still runs a skip (coalesce folds missed ticks into one run).
        scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(1)}, timezone=UTC)
        scheduler.add_job(
            self._scheduled_sweep,
            _trigger(schedule),
            id=SWEEP_JOB_ID,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, math.ceil(schedule.misfire_grace_seconds)),
        )
        scheduler.start()
        self._closing.callback(scheduler.shutdown, wait=True)
        return scheduler

    # -- sweeps ----------------------------------------------------------------------------------

    def sweep_now(self, dry_run: bool | None = None) -> dict[str, Any]:
        """Run one sweep now, after the one in progress if any; returns its report. Raises what the
        sweep raised (counted in tqgc_sweep_errors_total).

        `dry_run` defaults to how the sidecar was started; a sidecar started dry-run never deletes, and
        refuses `dry_run=False`."""
        if dry_run is False and self._dry_run:
            raise ConfigError(
                f"the tq-gc sidecar {self._name!r} was started dry-run "
                "(start_sidecar(config, dry_run=True) or `tq-gc serve --dry-run`), so it only dry-runs: "
                "start it without that to let it delete"
            )
        with self._sweep_lock:
            self._check_open()
            return self._sweep(self._dry_run if dry_run is None else dry_run).to_dict()

    def _scheduled_sweep(self) -> None:
        # A tick while sweep_now() runs is dropped, not queued: that sweep covers it.
        if not self._sweep_lock.acquire(blocking=False):
            log.info("scheduled sweep skipped: another sweep of this sidecar is running")
            return
        try:
            if not self._closed:
                self._sweep(dry_run=self._dry_run)
        except Exception:
            pass  # logged and counted by _sweep; the schedule goes on
        finally:
            self._sweep_lock.release()

    def _sweep(self, dry_run: bool) -> SweepReport:
        """One sweep; the caller holds the sweep lock."""
        self._last_sweep_at = time.monotonic()
        try:
            report = self._collector.sweep(dry_run=dry_run)
        except Exception as exc:
            self._metrics.record_error()
            self._last_error = {"at": utc_now_iso(), "error": f"{type(exc).__name__}: {exc}"}
            log.exception("sweep raised %s; the next scheduled sweep starts afresh", type(exc).__name__)
            raise
        if report.cause is Cause.ERROR:  # unforeseen: counted as an error too, as if it had raised
            self._metrics.record_error()
            self._last_error = {"at": utc_now_iso(), "error": report.reason}
        self._metrics.observe(report)
        self._reports.appendleft(report.to_dict())
        self._observe_liveness(self._reports[0])
        counts = report.counts
        log.info(
            "sweep %s: %s%s, %d in scope, %d deleted, %d waiting out their grace",
            report.run_id,
            report.outcome.value,
            f" ({report.reason})" if report.reason else "",
            counts.in_scope,
            counts.deleted,
            counts.within_grace,
        )
        return report

    # -- control ---------------------------------------------------------------------------------

    def log_lines(self, seen: int) -> tuple[int, list[str]]:
        """The sidecar's log lines after the first `seen` (its sweeps, their outcomes), and the number to
        ask from next: what `tq-gc serve` streams."""
        return self._log_lines.since(seen)

    def started_with(self) -> Config:
        """The config this sidecar was started with: start_sidecar compares it with its own."""
        return self._config

    def started_how(self) -> StartOptions:
        """The options this sidecar was started with: start_sidecar compares them with its own."""
        return self._options

    def _observe_liveness(self, report: dict[str, Any]) -> None:
        """The liveness gauges, from the run summaries in the state store: read once (at the first sweep,
        which they include: a restarted sidecar goes on from its predecessor's), then this sidecar's own
        reports added to them, so that a sweep does not read 200 summaries."""
        if self._liveness_runs is None:
            try:
                runs = self._state.recent_runs(RUNS_KEPT)
            except Exception as exc:  # the sweep's own report stands; read again at the next sweep
                log.warning("liveness not updated: reading the run summaries failed: %s", exc)
                return
            self._liveness_runs = deque(runs, maxlen=RUNS_KEPT)
        else:
            self._liveness_runs.appendleft(report)
        self._metrics.observe_liveness(liveness(list(self._liveness_runs), datetime.now(UTC)))

    def status(self) -> dict[str, Any]:
        """Paused or not, warming up or not, next run, last reports (newest first), lease holder, metrics
        port."""
        job = None if self._closed else self._scheduler.get_job(SWEEP_JOB_ID)
        next_run = job.next_run_time if job is not None else None
        return {
            "name": self._name,
            "ray_namespace": SIDECAR_RAY_NAMESPACE,
            "namespace": self._config.namespace,
            "state_url": self._config.redacted()["state_url"],
            "execute": not self._dry_run,
            "duty_cycle": self._options.duty_cycle,
            "change_journal": self._options.change_journal,
            "schedule": self._describe_schedule(),
            "running": not self._closed,
            "paused": next_run is None,
            "sweeping": self._sweep_lock.locked(),
            # importing TransferQueue at its start (3-6 s of CPU, minutes on a starved machine)
            "warming_up": transfer_queue_importing(),
            "next_run_at": next_run.isoformat() if next_run is not None else None,
            "last_reports": list(self._reports),
            "last_error": self._last_error,
            "lease": self._lease(),
            "metrics_port": self._metrics_port,
            **self._whereabouts,
        }

    def pause(self) -> None:
        """No more scheduled sweeps until resume(); a sweep in progress finishes. sweep_now() still works."""
        self._check_open()
        self._scheduler.pause_job(SWEEP_JOB_ID)
        log.info("scheduled sweeps paused")

    def resume(self) -> None:
        """Resume the schedule; the next sweep is one interval (or the next cron time) from now."""
        self._check_open()
        self._scheduler.resume_job(SWEEP_JOB_ID)
        log.info("scheduled sweeps resumed")

    def shutdown(self) -> None:
        """Stop the schedule, stop a sweep in progress (before its next request to TQ; a delete call runs
        to its end) and wait for it, close what this actor opened (the state store, the row store's
        client, the metrics server; never the TQ itself). Idempotent."""
        if self._closed:
            return
        self._scheduler.pause()  # no new tick; the scheduler's own shutdown below waits for a running one
        self._collector.stop()  # a sweep in progress stops before its next request to TQ
        with self._sweep_lock:
            self._closed = True
            self._closing.close()
        log.info("tq-gc sidecar %r shut down", self._name)

    # -- the admission registry, hosted here (with memory:// it is this actor's state) -------------
    # Any process in the cluster can call these on the actor's handle, not only AdmissionRegistry: each
    # checks its input as the registry does, so that a bad call is refused rather than recorded.

    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        self._state.admit(
            checked_name("admission_id", admission_id), checked_rows(rows), checked_whole_ms(ttl_ms)
        )

    def renew_admission(self, admission_id: str, ttl_ms: int) -> bool:
        return self._state.renew_admission(
            checked_name("admission_id", admission_id), checked_whole_ms(ttl_ms)
        )

    def release_admission(self, admission_id: str) -> None:
        self._state.release_admission(checked_name("admission_id", admission_id))

    def live_admissions(self) -> dict[str, AdmissionRows]:
        return self._state.live_admissions()

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        self._state.raise_fence(checked_name("fence name", name), checked_whole_ms(ttl_ms))

    def lower_fence(self, name: str) -> None:
        self._state.lower_fence(checked_name("fence name", name))

    def live_fences(self) -> dict[str, int]:
        return self._state.live_fences()

    def delete_in_flight(self) -> bool:
        return self._state.delete_in_flight()

    # -- helpers ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise TqGcError(f"the tq-gc sidecar {self._name!r} has been shut down")

    def _lease(self) -> dict[str, Any] | None:
        if self._closed:
            return None
        try:
            lease = self._state.lease_holder()
            now_ms = self._state.now_ms()
        except StoreUnavailable as exc:
            return {"error": str(exc)}
        if lease is None:
            return None
        return {"holder": lease.holder, "expires_in_s": (lease.expires_at_ms - now_ms) / 1000}

    def _describe_schedule(self) -> str:
        schedule = self._config.schedule
        every = f"cron {schedule.cron!r}" if schedule.cron else f"every {schedule.interval_seconds:g} s"
        mode = "dry run" if self._dry_run else "deleting"
        pressure = self._config.pressure
        under = ""
        if pressure.headroom_below is not None:
            every_s = self._pressure_timing.interval_seconds
            under = f"; every {every_s:g} s while headroom < {pressure.headroom_below:.0%}"
        return f"{every}, {mode}, grace {self._config.grace_seconds:g} s{under}"


def _trigger(schedule: Schedule) -> IntervalTrigger | CronTrigger:
    if schedule.cron is not None:
        return CronTrigger.from_crontab(schedule.cron, timezone=UTC)
    return IntervalTrigger(seconds=schedule.interval_seconds, timezone=UTC)


def _whereabouts() -> dict[str, str | None]:
    """Where this actor runs: its node's IP, its actor id, and the Ray job of the driver that started it
    (and owns it: `tq-gc serve` stops only one it started). None where Ray cannot say: status() must
    answer all the same."""
    found: dict[str, str | None] = dict.fromkeys(("node_ip", "actor_id", "driver_job_id"))
    try:
        if ray.is_initialized():
            context = ray.get_runtime_context()
            actor_id = context.get_actor_id()
            found["actor_id"] = None if actor_id is None else str(actor_id)
            found["driver_job_id"] = str(context.get_job_id())
            found["node_ip"] = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # status() must answer even where Ray cannot say
        pass
    return found


__all__ = ["SidecarActor"]
