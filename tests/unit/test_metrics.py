"""Metrics: how a sweep report maps onto the tqgc_* series, /metrics over HTTP, and the Pushgateway push
against a real local HTTP server that records what it was sent."""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry

from tq_gc.decisions import KEEPS
from tq_gc.footprint import Bytes, StorageFill, UnitFill
from tq_gc.metrics import KEEP_REASONS, StoreSeries, SweepMetrics, kept_by_reason, push_report
from tq_gc.report import Cause, Counts, Outcome, SweepReport, SweepWarning, WarningKind
from tq_gc.stores.transferqueue import STORE_SERIES
from tq_gc.stores.transferqueue.controller_function import MISFITS_FOUND
from tq_gc.stores.transferqueue.internals import QUIET_WAITS

from support.not_http import not_http_server

FINISHED_AT = "2024-05-01T12:00:00.000+00:00"
FINISHED_TS = 1714564800.0


def report(
    outcome: Outcome = Outcome.COMPLETED, reason: str | None = None, cause: Cause | None = None, **counts: int
) -> SweepReport:
    values = Counts(**counts)  # type: ignore[arg-type]
    return SweepReport(
        run_id="r1",
        namespace="job-42",
        dry_run=outcome is Outcome.DRY_RUN,
        outcome=outcome,
        reason=reason,
        cause=cause,
        finished_at=FINISHED_AT,
        counts=values,
        phases_ms={"lease": 2.0, "list": 30.0, "references": 5.0, "plan": 1.0, "delete": 0.0},
    )


def value(metrics: SweepMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_completed_sweep_maps_onto_every_series() -> None:
    metrics = SweepMetrics()
    done = report(deleted=7, within_grace=3, over_cap=2, recheck_saved=1)
    done.counts.referenced.update(admissions=4, manifests=5, tags=6)
    metrics.observe(done)

    assert value(metrics, "tqgc_sweeps_total", outcome="completed") == 1
    assert value(metrics, "tqgc_sweeps_total", outcome="aborted") == 0
    assert value(metrics, "tqgc_rows_deleted_total") == 7
    kept = {reason: value(metrics, "tqgc_rows_kept_total", reason=reason) for reason in KEEP_REASONS}
    assert kept == {"admission": 4, "manifest": 5, "tag": 6, "owner": 0, "grace": 3, "recheck": 1, "cap": 2}
    assert value(metrics, "tqgc_orphans_waiting") == 3
    assert value(metrics, "tqgc_last_success_timestamp_seconds") == FINISHED_TS
    assert value(metrics, "tqgc_sweep_phase_seconds_sum", phase="list") == pytest.approx(0.030)
    # The delete phase never ran (0 ms): no observation rather than a fake zero-length one.
    assert value(metrics, "tqgc_sweep_phase_seconds_count", phase="delete") is None
    assert value(metrics, "tqgc_lease_contention_total") == 0


def test_counters_add_up_over_sweeps() -> None:
    metrics = SweepMetrics()
    for deleted in (2, 3):
        metrics.observe(report(deleted=deleted, within_grace=1))
    assert value(metrics, "tqgc_sweeps_total", outcome="completed") == 2
    assert value(metrics, "tqgc_rows_deleted_total") == 5
    assert value(metrics, "tqgc_rows_kept_total", reason="grace") == 2


def test_a_held_lease_counts_as_contention_and_keeps_the_last_good_gauges() -> None:
    metrics = SweepMetrics()
    metrics.observe(report(within_grace=9))
    skipped = report(Outcome.SKIPPED, reason="lease held by cron-1:42", cause=Cause.LEASE_HELD)
    skipped.finished_at = "2024-05-01T13:00:00.000+00:00"
    metrics.observe(skipped)
    metrics.observe(report(Outcome.SKIPPED, reason="checkpoint fence up: ckpt-7", cause=Cause.FENCE_UP))

    assert value(metrics, "tqgc_sweeps_total", outcome="skipped") == 2
    assert value(metrics, "tqgc_lease_contention_total") == 1
    assert value(metrics, "tqgc_orphans_waiting") == 9
    assert value(metrics, "tqgc_last_success_timestamp_seconds") == FINISHED_TS


def test_an_aborted_sweep_is_not_a_success_and_a_dry_run_is() -> None:
    metrics = SweepMetrics()
    metrics.observe(report(Outcome.ABORTED, reason="reference source 'manifests' failed"))
    assert value(metrics, "tqgc_last_success_timestamp_seconds") == 0
    metrics.observe(report(Outcome.DRY_RUN, within_grace=4))
    assert value(metrics, "tqgc_last_success_timestamp_seconds") == FINISHED_TS
    assert value(metrics, "tqgc_orphans_waiting") == 4


def test_each_keep_reason_is_counted_under_its_field_and_exported_under_its_label() -> None:
    counts = Counts()
    for rows, decision in enumerate(KEEPS, start=1):
        counts.set_kept(decision, rows)
    assert counts.kept() == {decision: rows for rows, decision in enumerate(KEEPS, start=1)}
    fields = counts.to_dict()
    assert (fields["referenced"], fields["within_grace"], fields["recheck_saved"], fields["over_cap"]) == (
        {"admissions": 1, "manifests": 2, "tags": 3, "owners": 4},
        5,
        6,
        7,
    )
    assert Counts.from_dict(fields) == counts
    done = report()
    done.counts = counts
    assert kept_by_reason(done) == dict(zip(KEEP_REASONS, range(1, 8), strict=True))
    assert KEEP_REASONS == ("admission", "manifest", "tag", "owner", "grace", "recheck", "cap")


def test_errors_are_counted_apart_from_outcomes() -> None:
    metrics = SweepMetrics()
    metrics.record_error()
    assert value(metrics, "tqgc_sweep_errors_total") == 1
    assert all(value(metrics, "tqgc_sweeps_total", outcome=o.value) == 0 for o in Outcome)


def test_every_metric_has_the_prefix_and_help_text() -> None:
    families = list(SweepMetrics().registry.collect())
    assert {f.name for f in families} == {
        "tqgc_sweeps",
        "tqgc_rows_deleted",
        "tqgc_rows_kept",
        "tqgc_orphans_waiting",
        "tqgc_sweep_phase_seconds",
        "tqgc_last_success_timestamp_seconds",
        "tqgc_lease_contention",
        "tqgc_sweep_errors",
        "tqgc_sweep_warnings",
        "tqgc_tq_request_seconds",
        "tqgc_tq_pacing_seconds",
        "tqgc_partition_listings",
        "tqgc_tq_controller_function_misfits",
        *FOOTPRINT_FAMILIES,
        "tqgc_sweep_share",
        "tqgc_sweeps_since_completed",
        "tqgc_checkpoint_blocking_seconds",
    }
    assert all(f.documentation.strip() for f in families)


FOOTPRINT_FAMILIES = {
    "tqgc_orphan_bytes",
    "tqgc_referenced_bytes",
    "tqgc_orphan_rows",
    "tqgc_reclaimed_bytes",
    "tqgc_storage_unit_capacity_rows",
    "tqgc_storage_unit_active_keys",
    "tqgc_storage_headroom_ratio",
    "tqgc_storage_free_rows",
    "tqgc_storage_pressure",
}


def test_a_report_sets_the_bytes_and_the_storage_fill() -> None:
    metrics = SweepMetrics(pressure_below=0.3)
    report = SweepReport(
        "r", "ns", dry_run=False, outcome=Outcome.COMPLETED, finished_at="2026-12-04T10:00:00+00:00"
    )
    report.counts.eligible, report.counts.within_grace = 3, 4
    report.bytes = Bytes(orphaned=700, eligible=300, within_grace=400, referenced=50, reclaimed=1000)
    report.storage = StorageFill((UnitFill("u0", 100, 75), UnitFill("u1", 100, 20)))

    metrics.observe(report)
    metrics.observe(report)

    assert value(metrics, "tqgc_orphan_bytes", state="eligible") == 300
    assert value(metrics, "tqgc_orphan_bytes", state="within_grace") == 400
    assert value(metrics, "tqgc_referenced_bytes") == 50
    assert value(metrics, "tqgc_orphan_rows") == 7
    assert value(metrics, "tqgc_reclaimed_bytes_total") == 2000
    assert value(metrics, "tqgc_storage_unit_capacity_rows", unit="u0") == 100
    assert value(metrics, "tqgc_storage_unit_active_keys", unit="u1") == 20
    assert value(metrics, "tqgc_storage_headroom_ratio") == pytest.approx(0.25)
    assert value(metrics, "tqgc_storage_free_rows") == 25
    assert value(metrics, "tqgc_storage_pressure") == 1


def test_the_pressure_gauge_follows_the_headroom_against_the_threshold_not_the_warnings() -> None:
    """Other sweep warnings (sweep ones, say) do not raise the gauge; a headroom below the threshold does,
    with or without a warning in the report; no threshold set: never under pressure."""
    metrics = SweepMetrics(pressure_below=0.3)
    roomy = SweepReport("r", "ns", dry_run=False, outcome=Outcome.COMPLETED, finished_at=FINISHED_AT)
    roomy.storage = StorageFill((UnitFill("u0", 100, 60),))  # 40% headroom
    roomy.warnings = [SweepWarning(WarningKind.SCOPE_PARTITION_MISSING, "a sweep warning not about storage")]
    metrics.observe(roomy)
    assert value(metrics, "tqgc_storage_pressure") == 0

    full = SweepReport("r", "ns", dry_run=False, outcome=Outcome.COMPLETED, finished_at=FINISHED_AT)
    full.storage = StorageFill((UnitFill("u0", 100, 75),))  # 25% headroom
    metrics.observe(full)
    assert value(metrics, "tqgc_storage_pressure") == 1

    unset = SweepMetrics()
    full.warnings = [SweepWarning(WarningKind.STORAGE_PRESSURE, "storage pressure: ...")]
    unset.observe(full)
    assert value(unset, "tqgc_storage_pressure") == 0


def test_push_report_sets_the_pressure_gauge_from_the_threshold(gateway: FakeGateway) -> None:
    full = report()
    full.storage = StorageFill((UnitFill("u0", 100, 95),))
    assert push_report(gateway.url, "job-42", full, pressure_below=0.1)
    assert "tqgc_storage_pressure 1.0" in gateway.pushes[-1].body


def test_each_controller_function_found_not_to_fit_is_counted_by_function() -> None:
    metrics = SweepMetrics(store=STORE_SERIES)
    before = value(metrics, "tqgc_tq_controller_function_misfits_total", function="quiet_waits")
    MISFITS_FOUND.add(QUIET_WAITS)
    assert value(metrics, "tqgc_tq_controller_function_misfits_total", function="quiet_waits") == before + 1
    again = SweepMetrics(store=STORE_SERIES)
    assert value(again, "tqgc_tq_controller_function_misfits_total", function="quiet_waits") == (
        before + 1
    ), "a count of this process's, whichever registry reads it"


def test_the_row_store_hands_in_its_series_and_their_label_values() -> None:
    found = {"pages": 3}
    metrics = SweepMetrics(store=StoreSeries(("list", "clear"), ("pages", "waits"), found.copy))
    assert value(metrics, "tqgc_tq_request_seconds_count", op="list") == 0  # exported from the start
    assert value(metrics, "tqgc_tq_request_seconds_count", op="clear") == 0
    assert value(metrics, "tqgc_tq_controller_function_misfits_total", function="pages") == 3
    assert value(metrics, "tqgc_tq_controller_function_misfits_total", function="waits") == 0
    found["pages"] = 4
    assert value(metrics, "tqgc_tq_controller_function_misfits_total", function="pages") == 4, "read anew"
    bare = SweepMetrics()
    assert value(bare, "tqgc_tq_request_seconds_count", op="list") is None
    assert value(bare, "tqgc_tq_controller_function_misfits_total", function="pages") is None


def test_registration_is_idempotent_and_instances_do_not_collide() -> None:
    registry = CollectorRegistry()
    first, again = SweepMetrics(registry), SweepMetrics(registry)
    first.observe(report(deleted=1))
    again.observe(report(deleted=1))
    assert value(first, "tqgc_rows_deleted_total") == 2

    other = SweepMetrics()
    assert value(other, "tqgc_rows_deleted_total") == 0


def test_metrics_are_served_over_http_on_an_ephemeral_port() -> None:
    metrics = SweepMetrics()
    metrics.observe(report(deleted=7))
    server, port = metrics.serve_http(0, addr="127.0.0.1")
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert "tqgc_rows_deleted_total 7.0" in body
    assert "# HELP tqgc_orphans_waiting" in body


# -- Pushgateway ------------------------------------------------------------------------------------


@dataclass
class Push:
    method: str
    path: str
    body: str


@dataclass
class FakeGateway:
    """A real HTTP server on 127.0.0.1 that accepts pushes like a Pushgateway and keeps them."""

    url: str
    pushes: list[Push] = field(default_factory=list)


@pytest.fixture
def gateway() -> Iterator[FakeGateway]:
    pushes: list[Push] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            pushes.append(Push(self.command, self.path, self.rfile.read(length).decode()))
            self.send_response(200)
            self.end_headers()

        do_PUT = do_POST = _record

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeGateway(f"http://127.0.0.1:{server.server_port}", pushes)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_push_report_replaces_the_group_after_a_successful_sweep(gateway: FakeGateway) -> None:
    assert push_report(gateway.url, "job-42", report(deleted=7))
    [push] = gateway.pushes
    assert (push.method, push.path) == ("PUT", "/metrics/job/tq-gc/namespace/job-42")
    assert "tqgc_rows_deleted_total 7.0" in push.body
    assert "tqgc_last_success_timestamp_seconds" in push.body


def test_a_push_carries_the_row_stores_series(gateway: FakeGateway) -> None:
    assert push_report(gateway.url, "job-42", report(deleted=1), StoreSeries(("kv_list",), ("pages",), dict))
    [push] = gateway.pushes
    assert 'tqgc_tq_request_seconds_count{op="kv_list"} 0.0' in push.body
    assert 'tqgc_tq_controller_function_misfits_total{function="pages"} 0.0' in push.body


def test_push_after_a_failed_sweep_keeps_the_last_good_gauges(gateway: FakeGateway) -> None:
    assert push_report(gateway.url, "job-42", report(Outcome.ABORTED, reason="blast radius"))
    [push] = gateway.pushes
    # POST replaces only the series it carries: the gateway keeps the last success time it had.
    assert push.method == "POST"
    assert 'tqgc_sweeps_total{outcome="aborted"} 1.0' in push.body
    assert "tqgc_rows_deleted_total" in push.body
    assert "tqgc_last_success_timestamp_seconds" not in push.body
    assert "tqgc_orphans_waiting" not in push.body


def test_an_unreachable_gateway_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    # configure_logging (CLI tests) stops tq_gc's logs from propagating: listen on the logger itself.
    logger = logging.getLogger("tq_gc.metrics")
    logger.addHandler(caplog.handler)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_port
    server.server_close()  # nothing listens there now: the connection is refused
    try:
        assert not push_report(f"http://127.0.0.1:{port}", "job-42", report())
    finally:
        logger.removeHandler(caplog.handler)
    assert "could not push metrics" in caplog.text


@pytest.fixture
def not_a_gateway() -> Iterator[str]:
    with not_http_server() as url:
        yield url


@pytest.mark.parametrize("outcome", [Outcome.COMPLETED, Outcome.ABORTED])
def test_a_reply_that_is_not_http_or_a_malformed_url_is_logged_not_raised(
    not_a_gateway: str, outcome: Outcome, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("tq_gc.metrics")
    logger.addHandler(caplog.handler)
    try:
        assert not push_report(not_a_gateway, "job-42", report(outcome, deleted=3))  # BadStatusLine
        assert not push_report("http://[::1", "job-42", report(outcome, deleted=3))  # ValueError
    finally:
        logger.removeHandler(caplog.handler)
    pushes = [line for line in caplog.text.splitlines() if "could not push metrics" in line]
    assert any("BadStatusLine" in line for line in pushes) and any("ValueError" in line for line in pushes)


def test_each_tq_request_of_a_sweep_is_observed_under_its_operation() -> None:
    metrics = SweepMetrics(store=STORE_SERIES)
    done = report(deleted=1)
    done.record_tq_requests({"kv_retrieve_keys": [0.0008, 0.002], "clear_samples": [0.3]})
    metrics.observe(done)
    metrics.observe(done)

    def observed(op: str, le: str | None = None) -> float | None:
        if le is None:
            return value(metrics, "tqgc_tq_request_seconds_count", op=op)
        return value(metrics, "tqgc_tq_request_seconds_bucket", op=op, le=le)

    assert observed("kv_retrieve_keys") == 4
    assert observed("kv_retrieve_keys", le="0.001") == 2
    assert observed("clear_samples") == 2
    assert observed("clear_samples", le="0.25") == 0
    assert value(metrics, "tqgc_tq_request_seconds_sum", op="clear_samples") == pytest.approx(0.6)
    assert observed("get_partition_index_range") == 0  # exported from the start, before any request


def test_a_sweep_that_made_no_tq_request_observes_none() -> None:
    metrics = SweepMetrics(store=STORE_SERIES)
    metrics.observe(report(outcome=Outcome.SKIPPED, cause=Cause.LEASE_HELD))
    assert value(metrics, "tqgc_tq_request_seconds_count", op="kv_retrieve_meta") == 0


def test_the_time_a_sweep_waited_by_the_stores_pacing_is_counted_by_kind() -> None:
    metrics = SweepMetrics(store=STORE_SERIES)
    assert value(metrics, "tqgc_tq_pacing_seconds_total", kind="quiet_wait") == 0  # exported from the start
    assert value(metrics, "tqgc_tq_pacing_seconds_total", kind="duty_pause") == 0
    done = report(deleted=1)
    done.pacing_ms = {"quiet_wait": 250.0, "duty_pause": 40.0}
    metrics.observe(done)
    metrics.observe(done)
    assert value(metrics, "tqgc_tq_pacing_seconds_total", kind="quiet_wait") == pytest.approx(0.5)
    assert value(metrics, "tqgc_tq_pacing_seconds_total", kind="duty_pause") == pytest.approx(0.08)
