"""Prometheus metrics, all prefixed `tqgc_`: one `SweepMetrics` per process, fed from sweep reports.

The sidecar serves them on `/metrics` (`serve_http`); a CLI sweep run by a CronJob pushes them to a
Pushgateway (`push_report`). Each `SweepMetrics` owns its own `CollectorRegistry`, never the global
one: several instances in one process (tests, a CLI sweep inside a sidecar's process) must not collide.

Counters fed from reports count row *decisions* summed over sweeps: a row kept for its grace across
five sweeps adds five to `tqgc_rows_kept_total{reason="grace"}`. The gauge `tqgc_orphans_waiting` is
the number of rows waiting out their grace as of the last sweep that got that far.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import push_to_gateway, pushadd_to_gateway, start_http_server
from prometheus_client.registry import Collector

from tq_gc.decisions import KEEPS
from tq_gc.listings import ListedBy
from tq_gc.liveness import Liveness
from tq_gc.metrics_footprint import KEPT_AFTER_FAILURE, FootprintMetrics
from tq_gc.redaction import redact_text, redact_url
from tq_gc.report import PHASES, Cause, Outcome, SweepReport, WarningKind

log = logging.getLogger(__name__)

PREFIX = "tqgc_"
PUSH_JOB = "tq-gc"
PUSH_TIMEOUT_SECONDS = 10.0
# Sweep phases run from about a millisecond (plan on a small partition) to minutes (deleting 100k
# rows under a rate limit).
PHASE_BUCKETS_SECONDS = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# tq-gc's own TQ requests: a paced request takes a few ms; the job's loop notices from ~10 ms on; one
# kv_list of a million rows takes seconds.
TQ_REQUEST_BUCKETS_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
# tqgc_rows_kept_total{reason}: each keep decision's value.
KEEP_REASONS = tuple(decision.value for decision in KEEPS)
# Outcomes after which the report's counts describe the whole in-scope population.
_SUCCESS = (Outcome.COMPLETED, Outcome.DRY_RUN)
# Gauges a run that did not succeed must not overwrite on a Pushgateway: they hold the last good run's.
_KEPT_AFTER_FAILURE = (
    PREFIX + "last_success_timestamp_seconds",
    PREFIX + "orphans_waiting",
    *KEPT_AFTER_FAILURE,
)


class StoreSeries(NamedTuple):
    """What the row store's backend adds to the metrics, handed in so that they know no backend: the
    operations its requests are timed under (tqgc_tq_request_seconds{op}, exported from the start), its
    functions run inside the controller, and how many times each was found not to fit in this process
    (tqgc_tq_controller_function_misfits_total{function}, read at each scrape or push)."""

    request_ops: tuple[str, ...] = ()
    controller_functions: tuple[str, ...] = ()
    misfits: Callable[[], Mapping[str, int]] = dict
    pacing_waits: tuple[str, ...] = ()  # what its pacing waits for (tqgc_tq_pacing_seconds_total{kind})


NO_STORE_SERIES = StoreSeries()


@dataclass(frozen=True, slots=True)
class _Collectors:
    sweeps: Counter
    rows_deleted: Counter
    rows_kept: Counter
    orphans_waiting: Gauge
    phase_seconds: Histogram
    last_success: Gauge
    lease_contention: Counter
    sweep_errors: Counter
    tq_request_seconds: Histogram
    tq_pacing_seconds: Counter
    partition_listings: Counter
    sweep_warnings: Counter


def _register(registry: CollectorRegistry, store: StoreSeries) -> _Collectors:
    def name(short: str) -> str:
        return PREFIX + short

    collectors = _Collectors(
        sweeps=Counter(name("sweeps"), "Sweeps finished, by outcome.", ["outcome"], registry=registry),
        rows_deleted=Counter(name("rows_deleted"), "Rows deleted.", registry=registry),
        rows_kept=Counter(
            name("rows_kept"),
            "In-scope rows kept, by reason, summed over sweeps (a row kept by five sweeps counts five).",
            ["reason"],
            registry=registry,
        ),
        orphans_waiting=Gauge(
            name("orphans_waiting"),
            "Unreferenced rows waiting out their grace, as of the last sweep.",
            registry=registry,
        ),
        phase_seconds=Histogram(
            name("sweep_phase_seconds"),
            "Time spent in each sweep phase.",
            ["phase"],
            buckets=PHASE_BUCKETS_SECONDS,
            registry=registry,
        ),
        last_success=Gauge(
            name("last_success_timestamp_seconds"),
            "Unix time at which the last completed (or dry-run) sweep finished.",
            registry=registry,
        ),
        lease_contention=Counter(
            name("lease_contention"),
            "Sweeps skipped because another sweeper held the lease.",
            registry=registry,
        ),
        sweep_errors=Counter(
            name("sweep_errors"),
            "Sweeps that raised an unexpected error instead of reporting.",
            registry=registry,
        ),
        tq_request_seconds=Histogram(
            name("tq_request_seconds"),
            "tq-gc's own TransferQueue requests by operation, as its client timed them: how long each one "
            "held up the job's controller, which serves one request at a time.",
            ["op"],
            buckets=TQ_REQUEST_BUCKETS_SECONDS,
            registry=registry,
        ),
        tq_pacing_seconds=Counter(
            name("tq_pacing_seconds"),
            "Seconds tq-gc's row store waited between its TransferQueue requests, by kind: quiet_wait (for "
            "the controller's quiet moment), duty_pause (the duty cycle's). Time that held nothing up.",
            ["kind"],
            registry=registry,
        ),
        partition_listings=Counter(
            name("partition_listings"),
            "Partitions the row store listed, by how: journal (the listing kept from the last sweep, the "
            "rows the change journal says changed re-read) or full (the report's listings say why).",
            ["how"],
            registry=registry,
        ),
        sweep_warnings=Counter(
            name("sweep_warnings"),
            "Warnings of sweeps, by kind: a scope partition missing, sweeps further apart than the grace, "
            "--max-deletes clamped (the report's warnings say which).",
            ["kind"],
            registry=registry,
        ),
    )
    # Export every labelled series from the start, so a dashboard sees zeros rather than gaps.
    for outcome in Outcome:
        collectors.sweeps.labels(outcome=outcome.value)
    for reason in KEEP_REASONS:
        collectors.rows_kept.labels(reason=reason)
    for op in store.request_ops:
        collectors.tq_request_seconds.labels(op=op)
    for kind in store.pacing_waits:
        collectors.tq_pacing_seconds.labels(kind=kind)
    for by in ListedBy:
        collectors.partition_listings.labels(how=by.value)
    for kind in WarningKind:
        collectors.sweep_warnings.labels(kind=kind.value)
    registry.register(_ControllerFunctionMisfits(store))
    return collectors


class _ControllerFunctionMisfits(Collector):
    """tqgc_tq_controller_function_misfits_total{function}: read from this process's count at each scrape
    or push (the row store counts a misfit where it finds one: at attach, or mid-sweep)."""

    NAME = PREFIX + "tq_controller_function_misfits"

    def __init__(self, store: StoreSeries) -> None:
        self._store = store

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            self.NAME,
            "Times a function tq-gc runs inside the TransferQueue controller (index pages, key windows, "
            "quiet waits) was found not to fit it (another TQ version): tq-gc then uses TQ's own calls.",
            labels=["function"],
        )
        found = self._store.misfits()
        for function in self._store.controller_functions:
            family.add_metric([function.replace(" ", "_")], found.get(function, 0))
        yield family

    def describe(self) -> Iterable[Metric]:
        return self.collect()


_registered: weakref.WeakKeyDictionary[CollectorRegistry, _Collectors] = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


def _collectors_for(registry: CollectorRegistry, store: StoreSeries) -> _Collectors:
    """Register tq-gc's collectors on `registry` once; later calls get the same ones back."""
    with _registered_lock:
        collectors = _registered.get(registry)
        if collectors is None:
            collectors = _registered[registry] = _register(registry, store)
        return collectors


class SweepMetrics:
    """tq-gc's metrics on one registry (a fresh one unless given), with the row store's series (the first
    instance on a registry sets them). Thread-safe, like prometheus-client. `pressure_below`: the
    configured `pressure.headroom_below`, which the storage pressure gauge compares the headroom with."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        store: StoreSeries = NO_STORE_SERIES,
        pressure_below: float | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._c = _collectors_for(self.registry, store)
        # bytes and storage headroom (metrics_footprint.py)
        self.footprint = FootprintMetrics(self.registry, pressure_below)
        _liveness_gauges_for(self.registry)  # exported from the start, like the others

    def observe(self, report: SweepReport) -> None:
        """Count one finished sweep (any outcome)."""
        c = self._c
        self.footprint.observe(report)
        c.sweeps.labels(outcome=report.outcome.value).inc()
        if report.cause is Cause.LEASE_HELD:
            c.lease_contention.inc()
        for phase in PHASES:
            spent_ms = report.phases_ms.get(phase, 0.0)
            if spent_ms > 0:  # 0: the sweep never reached this phase (skipped, dry run: no delete)
                c.phase_seconds.labels(phase=phase).observe(spent_ms / 1000)
        c.rows_deleted.inc(report.counts.deleted)
        for op, durations in report.tq_request_seconds.items():
            by_op = c.tq_request_seconds.labels(op=op)
            for seconds in durations:
                by_op.observe(seconds)
        for kind, waited_ms in report.pacing_ms.items():
            c.tq_pacing_seconds.labels(kind=kind).inc(waited_ms / 1000)
        for how in report.listings.values():
            c.partition_listings.labels(how=how.by.value).inc()
        for reason, rows in kept_by_reason(report).items():
            c.rows_kept.labels(reason=reason).inc(rows)
        for warning in report.warnings:
            c.sweep_warnings.labels(kind=warning.kind.value).inc()
        if report.outcome in _SUCCESS:
            c.orphans_waiting.set(report.counts.within_grace)
            c.last_success.set(_timestamp(report.finished_at))

    def observe_liveness(self, found: Liveness) -> None:
        """Set the liveness gauges from what the state store's run summaries say (tq_gc/liveness.py)."""
        _liveness_gauges_for(self.registry).set(found)

    def record_error(self) -> None:
        """Count a sweep that raised instead of returning a report."""
        self._c.sweep_errors.inc()

    def serve_http(self, port: int, addr: str = "0.0.0.0") -> tuple[WSGIServer, int]:
        """Serve `/metrics` from a daemon thread; port 0 picks a free one. Returns (server, bound port).
        Stop it with `server.shutdown(); server.server_close()`."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server, int(server.server_port)

    def push(self, url: str, namespace: str, succeeded: bool) -> None:
        """Push to a Pushgateway, group {job="tq-gc", namespace=...}. A run that did not succeed
        replaces only the counters, so the group keeps the last good run's time and waiting rows."""
        grouping_key = {"namespace": namespace}
        if succeeded:
            push_to_gateway(url, PUSH_JOB, self.registry, grouping_key, timeout=PUSH_TIMEOUT_SECONDS)
            return
        names = {
            s.name for m in self.registry.collect() if m.name not in _KEPT_AFTER_FAILURE for s in m.samples
        }
        restricted = self.registry.restricted_registry(names)
        pushadd_to_gateway(url, PUSH_JOB, restricted, grouping_key, timeout=PUSH_TIMEOUT_SECONDS)


class _LivenessGauges:
    """The gauges of tq_gc/liveness.py, on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._shown: set[tuple[str, str]] = set()
        self.share = Gauge(
            PREFIX + "sweep_share",
            "Share of the sweeps of the last hour, by outcome and cause (completed and dry_run: cause "
            "none), from the run summaries in the state store (read at the first sweep, so across restarts).",
            ["outcome", "cause"],
            registry=registry,
        )
        self.since_completed = Gauge(
            PREFIX + "sweeps_since_completed",
            "The newest sweeps in a row that neither completed nor ran dry (skipped or aborted).",
            registry=registry,
        )
        self.checkpoint_blocking = Gauge(
            PREFIX + "checkpoint_blocking_seconds",
            "How long the newest sweeps in a row have been skipped for a checkpoint being written (a tmp_ "
            "directory, named in the skip's reason); 0 when the last sweep was not.",
            registry=registry,
        )

    def set(self, found: Liveness) -> None:
        with self._lock:
            for key in self._shown - found.shares.keys():
                self.share.labels(*key).set(0)
            for key, share in found.shares.items():
                self.share.labels(*key).set(share)
            self._shown |= found.shares.keys()
            self.since_completed.set(found.since_completed)
            self.checkpoint_blocking.set(0 if found.blocked is None else found.blocked.seconds)


_liveness_registered: weakref.WeakKeyDictionary[CollectorRegistry, _LivenessGauges] = (
    weakref.WeakKeyDictionary()
)


def _liveness_gauges_for(registry: CollectorRegistry) -> _LivenessGauges:
    with _registered_lock:
        gauges = _liveness_registered.get(registry)
        if gauges is None:
            gauges = _liveness_registered[registry] = _LivenessGauges(registry)
        return gauges


def kept_by_reason(report: SweepReport) -> dict[str, int]:
    """The report's kept rows under the metric's reasons (KEEP_REASONS)."""
    return {decision.value: rows for decision, rows in report.counts.kept().items()}


def push_report(
    url: str,
    namespace: str,
    report: SweepReport,
    store: StoreSeries = NO_STORE_SERIES,
    pressure_below: float | None = None,
) -> bool:
    """Push one sweep's metrics to the Pushgateway at `url` (job "tq-gc", grouping key namespace).

    A push that fails, however it fails, is logged, not raised: the sweep itself is done (it may have
    deleted rows), its report and exit code must stand, and a stale tqgc_last_success_timestamp_seconds
    is what alerts on a CronJob that stopped reporting. Returns whether the push went through."""
    metrics = SweepMetrics(store=store, pressure_below=pressure_below)
    metrics.observe(report)
    try:
        metrics.push(url, namespace, succeeded=report.outcome in _SUCCESS)
    # OSError (refused, timeout, an HTTP error status), http.client.HTTPException (a reply that is not
    # HTTP), ValueError (a malformed URL), or whatever else the client meets.
    except Exception as exc:
        shown, detail = redact_url(url), redact_text(str(exc), [url])  # the client may quote the URL
        log.warning(
            "could not push metrics to the Pushgateway at %s: %s: %s", shown, type(exc).__name__, detail
        )
        return False
    return True


def _timestamp(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return 0.0


__all__ = [
    "KEEP_REASONS",
    "NO_STORE_SERIES",
    "PREFIX",
    "StoreSeries",
    "SweepMetrics",
    "kept_by_reason",
    "push_report",
]
