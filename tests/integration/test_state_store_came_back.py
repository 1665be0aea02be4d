"""A state store that lost part of a sweep's view mid-sweep ends the sweep's deletes, on a real Redis.

- Hole 3: Redis comes back *with* its data (an append-only file; a failover looks the same) while a
  sweep runs. While it was away, a publisher's `holding()` could not admit, so the row it adopted meanwhile
  is in no write barrier: the sweep that lived through the outage must delete nothing more.
- Hole 8: a Redis restarted empty loses the record of what each reference source named, so an unmounted
  volume (an empty mount point) read as a source that released everything.
- Hole 6: the barrier's key vanishes (evicted under maxmemory, deleted) or is shortened mid-sweep: the
  admissions the sweep would have read from it are lost, so the sweep must delete nothing more.

The adopted row was a true orphan for a whole grace (its first-seen record is old): any sweep that misses
its new reference deletes it at once.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tools.testbed.redis_server import KillableRedisServer
from tq_gc.config import Config, parse_config
from tq_gc.errors import StoreUnavailable
from tq_gc.publish.manifest import write_manifest
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.report import Cause, Outcome, SweepReport
from tq_gc.state import RedisState
from tq_gc.state.keys import Keys
from tq_gc.sweep import Collector

from support.baseline import with_old_baseline
from support.scripted_store import ScriptedRowStore

STAGING, DATA = "rollout_staging", "rollout_data"
NAMESPACE = "came-back"
GRACE_S = 1.0
# The collectors' (a test-only parameter): outlives a restart of the server, the lease comes back with the
# data.
LEASE_TTL_S = 6.0
ADOPTED = "orphan/adopted"
DEADLINE_S = 60.0


def config_for(url: str) -> Config:
    return parse_config(
        {
            "namespace": NAMESPACE,
            "state_url": url,
            "scope": [{"partition": STAGING, "all_keys": True}],
            "tag_references": [{"partition": DATA, "key_path": "plan.keys", "target_partition": STAGING}],
            "grace_seconds": GRACE_S,
            "allow_short_grace": True,
            "limits": {"max_delete_fraction": 1.0},
        }
    )


@pytest.fixture
def aof_redis() -> Iterator[KillableRedisServer]:
    """A redis-server of this test's own with an append-only file, to restart with its data mid-sweep."""
    server = KillableRedisServer(appendonly=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def rows_with_an_old_orphan(config: Config, state: RedisState) -> ScriptedRowStore:
    """A staging partition whose orphans sweeps have seen unreferenced for more than a grace, in a store
    swept for a while (its source baseline is old: the empty tag source is judged, not waited for)."""
    with_old_baseline(state)
    rows = ScriptedRowStore()
    rows.put(DATA, "plan/base", {"plan": {"keys": []}})  # the tag partition exists
    for key in (ADOPTED, "orphan/other"):
        rows.put(STAGING, key)
    Collector(config, state, rows, lease_ttl_seconds=LEASE_TTL_S).sweep(dry_run=True)
    started = time.monotonic()
    while time.monotonic() - started < GRACE_S * 1.5:  # observed, with no gap, for longer than the grace
        time.sleep(GRACE_S / 4)
        Collector(config, state, rows, lease_ttl_seconds=LEASE_TTL_S).sweep(dry_run=True)
    return rows


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def adopt_in_a_tag_row(rows: ScriptedRowStore) -> None:
    """The job names the orphan in a row of the tag partition, which this sweep has listed already."""
    rows.put(DATA, "plan/adopting", {"plan": {"keys": [ADOPTED]}})


def assert_kept_and_stopped(report: SweepReport, rows: ScriptedRowStore) -> None:
    assert ADOPTED in rows.keys(STAGING), (report.outcome, report.reason, report.counts)
    assert report.outcome == Outcome.ABORTED, (report.outcome, report.reason)


@pytest.mark.parametrize("renewal_failed", [True, False], ids=["a-renewal-failed", "back-between-renewals"])
def test_a_redis_that_came_back_with_its_data_ends_the_sweeps_deletes(
    aof_redis: KillableRedisServer, caplog: pytest.LogCaptureFixture, renewal_failed: bool
) -> None:
    config = config_for(aof_redis.url)
    state = RedisState.from_url(aof_redis.url, NAMESPACE)
    rows = rows_with_an_old_orphan(config, state)
    registry = AdmissionRegistry.connect(aof_redis.url, namespace=NAMESPACE)
    caplog.set_level(logging.WARNING, logger="tq_gc.sweep.lease")

    def outage() -> None:
        aof_redis.shut_down()
        if renewal_failed:
            wait_for(lambda: "could not renew" in caplog.text, "a background renewal to fail")
        # The kit's holding() cannot admit while the store is down for everyone: the block runs.
        with pytest.raises(StoreUnavailable):
            registry.admit("adopting", {STAGING: [ADOPTED]}, ttl_seconds=600)
        adopt_in_a_tag_row(rows)
        aof_redis.start_again()

    # The tag partition is listed first (sorted), the staging partition second: the outage falls between.
    rows.before("list_keys", outage)
    try:
        report = Collector(config, state, rows, lease_ttl_seconds=LEASE_TTL_S).sweep(dry_run=False)
        rows.timeline.raise_errors()
        assert_kept_and_stopped(report, rows)
        assert "state store" in (report.reason or ""), report.reason
    finally:
        registry.close()
        state.close()


def delete_barrier(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.delete(Keys(NAMESPACE).admission_barrier)
    finally:
        client.close()


def shorten_barrier(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.ltrim(Keys(NAMESPACE).admission_barrier, 0, 0)
    finally:
        client.close()


class BeforeBatchState(RedisState):
    """A Redis state that runs an action once, right before the first delete batch's re-check of the
    sweep that armed it (the sweeping thread's second: the first is the lease's, before any read)."""

    action: Callable[[], None] | None = None
    _rechecks = 0

    def arm(self, action: Callable[[], None]) -> None:
        self.action, self._rechecks = action, 0

    def recheck(self, lease: Any, ttl_ms: int) -> Any:
        if self.action is not None and threading.current_thread() is threading.main_thread():
            self._rechecks += 1
            if self._rechecks == 2:
                self.action()
        return super().recheck(lease, ttl_ms)


@pytest.mark.parametrize(
    "lose_barrier, adopt_first",
    [(delete_barrier, False), (delete_barrier, True), (shorten_barrier, False)],
    ids=["evicted-then-adopted", "adopted-then-evicted", "shortened-then-adopted"],
)
def test_a_vanished_or_shortened_barrier_ends_the_sweeps_deletes(
    redis_url: str, lose_barrier: Callable[[str], None], adopt_first: bool
) -> None:
    config = config_for(redis_url)
    state = BeforeBatchState.from_url(redis_url, NAMESPACE)
    assert isinstance(state, BeforeBatchState)
    rows = rows_with_an_old_orphan(config, state)
    registry = AdmissionRegistry.connect(redis_url, namespace=NAMESPACE)

    def fill_barrier() -> None:  # admissions of other rows during the listing: the barrier has entries
        for n in range(3):
            registry.admit(f"other-{n}", {STAGING: [f"elsewhere/{n}"]}, ttl_seconds=600)

    def adopt() -> None:  # by the protocol: admitted, named in a tag row, released
        registry.admit("adopting", {STAGING: [ADOPTED]}, ttl_seconds=600)
        adopt_in_a_tag_row(rows)
        registry.release("adopting")

    def before_batch() -> None:
        if adopt_first:
            adopt()
        lose_barrier(redis_url)
        if not adopt_first:
            adopt()

    rows.before("list_keys", fill_barrier)
    state.arm(before_batch)
    try:
        report = Collector(config, state, rows, lease_ttl_seconds=LEASE_TTL_S).sweep(dry_run=False)
        rows.timeline.raise_errors()
        assert_kept_and_stopped(report, rows)
        assert "barrier" in (report.reason or ""), report.reason
    finally:
        for n in range(3):
            registry.release(f"other-{n}")
        registry.close()
        state.close()


# Hole 8: a Redis restarted empty, and the checkpoint volume unmounted at the same time ------------------

HELD = "held/by-a-manifest"


@pytest.fixture
def plain_redis() -> Iterator[KillableRedisServer]:
    """A redis-server of this test's own, without persistence, to restart empty mid-job."""
    server = KillableRedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_store_restarted_empty_does_not_forget_an_unmounted_volume(
    plain_redis: KillableRedisServer, tmp_path: Path
) -> None:
    """A sidecar-like sweeper (one Collector, many sweeps): its store restarts empty, losing the record
    of what each source named, while the volume of its manifests is unmounted (an empty directory). The
    manifest's row is never deleted, however long that lasts, and every sweep says why."""
    volume = tmp_path / "ckpt"
    manifest = volume / "ckpt-1" / "gc-manifest.json"
    manifest.parent.mkdir(parents=True)
    write_manifest(manifest, "ckpt-1", {STAGING: [HELD]})
    values = config_for(plain_redis.url).model_dump() | {
        "manifests": [{"glob": f"{volume}/**/gc-manifest.json"}]
    }
    config = parse_config(values)
    state = RedisState.from_url(plain_redis.url, NAMESPACE)
    rows = ScriptedRowStore()
    rows.put(DATA, "plan/base", {"plan": {"keys": [ADOPTED]}})
    rows.put(STAGING, HELD)
    rows.put(STAGING, ADOPTED)
    sweeper = Collector(config, state, rows, lease_ttl_seconds=LEASE_TTL_S)
    try:
        first = sweeper.sweep(dry_run=False)
        assert first.outcome == Outcome.COMPLETED and first.counts.referenced["manifests"] == 1, first.reason
        plain_redis.restart_empty()
        shutil.rmtree(volume)
        volume.mkdir()  # what an unmounted volume leaves: its mount point
        started = time.monotonic()
        while time.monotonic() - started < GRACE_S * 3:  # three graces, observed throughout
            report = sweeper.sweep(dry_run=False)
            assert HELD in rows.keys(STAGING), (report.outcome, report.reason, report.counts)
            assert (report.outcome, report.cause) == (Outcome.ABORTED, Cause.SOURCE_FAILED), report.reason
            assert "matches no file" in (report.reason or ""), report.reason
            time.sleep(GRACE_S / 4)
    finally:
        state.close()


def test_a_store_restarted_empty_does_not_let_fresh_sweepers_trust_an_unmounted_volume(
    plain_redis: KillableRedisServer, tmp_path: Path
) -> None:
    """CronJob-like sweepers (a new state and Collector every run, with no memory of the last): the store
    restarts empty while the volume of the manifests is unmounted. The first sweep after it has no
    baseline to compare with, so under the old rule it trusted the empty source and the manifest's row
    was deleted one grace later. Now no row is deleted while the store's new baseline is younger than a
    grace, and every sweep meanwhile says why."""
    volume = tmp_path / "ckpt"
    manifest = volume / "ckpt-1" / "gc-manifest.json"
    manifest.parent.mkdir(parents=True)
    write_manifest(manifest, "ckpt-1", {STAGING: [HELD]})
    values = config_for(plain_redis.url).model_dump() | {
        "manifests": [{"glob": f"{volume}/**/gc-manifest.json"}]
    }
    config = parse_config(values)
    rows = ScriptedRowStore()
    rows.put(DATA, "plan/base", {"plan": {"keys": [ADOPTED]}})
    rows.put(STAGING, HELD)
    rows.put(STAGING, ADOPTED)

    def cronjob_run() -> SweepReport:
        state = RedisState.from_url(plain_redis.url, NAMESPACE)
        try:
            return Collector(config, state, rows, lease_ttl_seconds=LEASE_TTL_S).sweep(dry_run=False)
        finally:
            state.close()

    first = cronjob_run()
    assert first.outcome == Outcome.COMPLETED and first.counts.referenced["manifests"] == 1, first.reason
    plain_redis.restart_empty()
    shutil.rmtree(volume)
    volume.mkdir()  # what an unmounted volume leaves: its mount point
    reports: list[SweepReport] = []
    started = time.monotonic()
    while time.monotonic() - started < GRACE_S * 2:  # the old rule deleted the row after one grace
        report = cronjob_run()
        reports.append(report)
        assert HELD in rows.keys(STAGING), (report.outcome, report.reason, report.counts)
        assert report.counts.deleted == 0, (report.outcome, report.reason, report.counts)
        time.sleep(GRACE_S / 4)
    rebuilding = [r for r in reports if (r.outcome, r.cause) == (Outcome.SKIPPED, Cause.BASELINE_REBUILDING)]
    assert reports[0] in rebuilding, (reports[0].outcome, reports[0].cause, reports[0].reason)
    for report in rebuilding:
        assert "'manifests:" in (report.reason or "") and "grace" in (report.reason or ""), report.reason
    # skipped, never aborted: then, once the baseline is a grace old, the sweeps go on
    ended = [(r.outcome, r.reason) for r in reports]
    assert all(outcome in (Outcome.SKIPPED, Outcome.COMPLETED) for outcome, _ in ended), ended
