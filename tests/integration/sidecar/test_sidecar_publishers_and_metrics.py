"""Publishers admit through the sidecar (memory:// state: the registry lives in the actor) and their rows
are safe while they renew; a publisher that stops renewing loses its protection after the TTL. And
/metrics, scraped over HTTP, matches the sweep reports."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
import ray
from harness import keys_in

from tq_gc.metrics import KEEP_REASONS, kept_by_reason
from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import SweepReport
from tq_gc.sidecar.client import sidecar_registry
from tq_gc.sidecar.names import SIDECAR_RAY_NAMESPACE
from tq_gc.state import RedisState

from .helpers import GRACE_S, INTERVAL_S, MakeConfig, StartSidecar, call, name_of, scrape, wait_until
from .remote_side import admit_and_vanish

pytestmark = pytest.mark.ray

TTL_S = 3.0  # renewed every second: a busy 2-core machine may hold a renewal up for two
CLOCK_SLACK_S = 0.05  # the actor's wall clock against this process's monotonic one


def registry_of(handle: Any) -> AdmissionRegistry:
    return sidecar_registry(name=name_of(handle), namespace=SIDECAR_RAY_NAMESPACE)


def test_admitted_rows_are_kept_while_renewed_and_reclaimed_after_the_ttl(
    make_config: MakeConfig,
    sidecar: StartSidecar,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    put_rows(tq_partition, ["renewed", "abandoned", "orphan"])
    config = make_config()  # memory://
    handle = sidecar(config)
    registry = registry_of(handle)

    # A publisher in a Ray worker admits a row, then dies without renewing. admit() has returned only
    # once the sidecar recorded it, so the very next sweep sees it.
    admitted_at = time.monotonic()  # no later than the worker's admit: its lease ends after TTL_S from here
    ray.get(admit_and_vanish.remote(name_of(handle), SIDECAR_RAY_NAMESPACE, tq_partition, "abandoned", TTL_S))
    # Admitted after the worker returned: starting a worker can take longer than the TTL on 2 cores.
    # The trainer kit renews it in a thread of its own (every third of the TTL), not between this
    # test's listings: a slow listing there once held a renewal past the TTL.
    gone_at: dict[str, float] = {}
    deadline = time.monotonic() + 20
    with GcClient(registry, ttl_seconds=TTL_S) as gc, gc.holding("trainer", {tq_partition: ["renewed"]}):
        assert set(registry.live()) == {"trainer", "vanishing-abandoned"}
        while "abandoned" not in gone_at and time.monotonic() < deadline:
            for key in {"renewed", "abandoned", "orphan"} - keys_in(tq, tq_partition) - set(gone_at):
                gone_at[key] = time.monotonic() - admitted_at
            time.sleep(INTERVAL_S / 2)
        assert set(registry.live()) == {"trainer"}

    lapsed = [r.getMessage() for r in caplog.records if "was lost by the registry" in r.getMessage()]
    assert not lapsed  # every renewal came before the TTL ran out
    assert set(gone_at) == {"orphan", "abandoned"}, gone_at
    assert gone_at["orphan"] < gone_at["abandoned"]
    # Protected until its lease expired, then unreferenced for a whole grace before the delete.
    assert gone_at["abandoned"] >= TTL_S + GRACE_S - CLOCK_SLACK_S
    # Released on leaving the block.
    wait_until("the released row is reclaimed", lambda: not keys_in(tq, tq_partition))


def test_metrics_served_over_http_match_the_reports(
    make_config: MakeConfig, sidecar: StartSidecar, tq_partition: str, put_rows: Any, redis_url: str
) -> None:
    put_rows(tq_partition, ["orphan/1", "orphan/2", "orphan/3", "admitted"])
    config = make_config(redis_url, schedule={"interval_seconds": 3600})
    handle = sidecar(config, metrics_port=0)  # only on-demand sweeps: every report is known
    registry_of(handle).admit("trainer", rows={tq_partition: ["admitted"]}, ttl_seconds=60)

    history = [call(handle, "sweep_now")]  # first sight: three rows start their grace
    for _ in range(4):  # a gap in observing longer than the grace starts the clocks again
        time.sleep(GRACE_S * 0.3)
        history.append(call(handle, "sweep_now", dry_run=True))  # the last: eligible, not deleted
    history.append(call(handle, "sweep_now"))  # deleted
    listed = len(history)
    other = RedisState.from_url(redis_url, config.namespace)  # another sweeper of this namespace
    try:
        lease = other.acquire_lease("cron-job", ttl_ms=30_000)
        assert lease is not None
        history.append(call(handle, "sweep_now"))  # skipped: lease held
        other.release_lease(lease)
    finally:
        other.close()

    assert [r["outcome"] for r in history] == ["completed", *["dry_run"] * 4, "completed", "skipped"]
    metrics = scrape(call(handle, "status")["metrics_port"])
    reports = [SweepReport.from_dict(r) for r in history]
    for outcome in ("completed", "dry_run", "skipped", "aborted"):
        expected = sum(1 for r in reports if r.outcome.value == outcome)
        assert metrics[("tqgc_sweeps_total", (("outcome", outcome),))] == expected
    assert metrics[("tqgc_rows_deleted_total", ())] == sum(r.counts.deleted for r in reports) == 3
    for reason in KEEP_REASONS:
        expected = sum(kept_by_reason(r)[reason] for r in reports)
        assert metrics[("tqgc_rows_kept_total", (("reason", reason),))] == expected
    assert metrics[("tqgc_rows_kept_total", (("reason", "admission"),))] == listed  # all but the skipped
    assert metrics[("tqgc_lease_contention_total", ())] == 1
    assert metrics[("tqgc_orphans_waiting", ())] == reports[listed - 1].counts.within_grace == 0
    last_success = datetime.fromisoformat(reports[listed - 1].finished_at).timestamp()
    assert metrics[("tqgc_last_success_timestamp_seconds", ())] == pytest.approx(last_success, abs=0.001)
    assert metrics[("tqgc_sweep_phase_seconds_count", (("phase", "list"),))] == listed  # not the skipped
    # liveness, from the run summaries in the state store: the last hour's shares, the skip at the end
    shares = {key[1]: value for key, value in metrics.items() if key[0] == "tqgc_sweep_share"}
    assert shares == {
        (("cause", "none"), ("outcome", "completed")): pytest.approx(2 / len(history)),
        (("cause", "none"), ("outcome", "dry_run")): pytest.approx(4 / len(history)),
        (("cause", "lease_held"), ("outcome", "skipped")): pytest.approx(1 / len(history)),
    }
    assert metrics[("tqgc_sweeps_since_completed", ())] == 1
    assert metrics[("tqgc_checkpoint_blocking_seconds", ())] == 0
