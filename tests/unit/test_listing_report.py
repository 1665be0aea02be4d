"""How each partition was listed in a sweep (the report's `listings`): the row store says it
(RowStore.take_listings: a TransferQueue store by its change journal or in full, and why), the collector
reads it once per sweep, the report carries it through its JSON and its text, and the metrics count it."""

from __future__ import annotations

import uuid

import pytest

from tq_gc.cli import render
from tq_gc.config import parse_config
from tq_gc.listings import HowListed, ListedBy
from tq_gc.metrics import SweepMetrics
from tq_gc.report import SweepReport
from tq_gc.state.memory import MemoryState
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.sweep import Collector

PARTITION = "rollout_staging"
REREAD = HowListed.by_journal(indexes_reread=12)
FIRST = HowListed.in_full("the first listing of this partition")


class JournalStore(MemoryRowStore):
    """A memory store that says how it listed each partition, as a TransferQueue store does."""

    def __init__(self, how: HowListed) -> None:
        super().__init__()
        self.how = how
        self.listed: dict[str, HowListed] = {}

    def list_keys(self, partition: str) -> dict[str, int]:
        self.listed[partition] = self.how
        return super().list_keys(partition)

    def take_listings(self) -> dict[str, HowListed]:
        taken, self.listed = self.listed, {}
        return taken


def collector(store: MemoryRowStore) -> Collector:
    config = parse_config(
        {"namespace": f"ns-{uuid.uuid4().hex[:6]}", "scope": [{"partition": PARTITION, "all_keys": True}]}
    )
    return Collector(config, MemoryState(config.namespace), store, holder="test")


def test_the_report_says_how_its_own_sweep_listed_each_partition() -> None:
    store = JournalStore(REREAD)
    store.put(PARTITION, "a", {"t": 1})
    store.listed = {"before": FIRST}  # listed before the sweep: not its own

    report = collector(store).sweep(dry_run=True)

    assert report.listings == {PARTITION: REREAD}
    assert report.to_dict()["listings"] == {PARTITION: {"by": "journal", "why": None, "indexes_reread": 12}}
    assert SweepReport.from_dict(report.to_dict()).listings == report.listings
    assert store.listed == {}


def test_a_full_listing_says_why() -> None:
    store = JournalStore(FIRST)
    report = collector(store).sweep(dry_run=True)
    assert report.to_dict()["listings"] == {
        PARTITION: {"by": "full", "why": "the first listing of this partition", "indexes_reread": None}
    }
    assert SweepReport.from_dict(report.to_dict()).listings == report.listings


def test_a_store_that_says_nothing_of_its_listings_reports_none() -> None:
    report = collector(MemoryRowStore()).sweep(dry_run=True)
    assert report.listings == {}
    assert report.to_dict()["listings"] == {}
    assert SweepReport.from_dict({**report.to_dict(), "listings": None}).listings == {}
    older = {key: value for key, value in report.to_dict().items() if key != "listings"}
    assert SweepReport.from_dict(older).listings == {}  # a run recorded before the field


def test_the_deferred_store_passes_the_attached_stores_listings_on() -> None:
    store = JournalStore(REREAD)
    deferred = DeferredRowStore(lambda: store)
    assert deferred.take_listings() == {}  # not attached yet
    deferred.list_keys(PARTITION)
    assert deferred.take_listings() == {PARTITION: REREAD}
    assert deferred.take_listings() == {}


def test_the_text_report_says_how_each_partition_was_listed(capsys: pytest.CaptureFixture[str]) -> None:
    render.sweep_report(collector(JournalStore(REREAD)).sweep(dry_run=True).to_dict())
    out = capsys.readouterr().out
    assert f"listed: {PARTITION} by the change journal (12 indexes re-read)" in out, out

    render.sweep_report(collector(JournalStore(FIRST)).sweep(dry_run=True).to_dict())
    out = capsys.readouterr().out
    assert f"listed: {PARTITION} in full (the first listing of this partition)" in out, out

    render.sweep_report(collector(MemoryRowStore()).sweep(dry_run=True).to_dict())
    assert "listed:" not in capsys.readouterr().out


def test_the_metrics_count_listings_by_how() -> None:
    metrics = SweepMetrics()

    def listings(how: str) -> float | None:
        return metrics.registry.get_sample_value("tqgc_partition_listings_total", {"how": how})

    assert listings("journal") == 0 and listings("full") == 0  # exported from the start
    report = SweepReport(run_id="r", namespace="n", dry_run=True)
    report.listings = {"a": REREAD, "b": FIRST, "c": REREAD}
    metrics.observe(report)
    metrics.observe(report)
    assert listings("journal") == 4 and listings("full") == 2


def test_how_listed_is_one_of_two_kinds() -> None:
    assert {kind.value for kind in ListedBy} == {"journal", "full"}
    with pytest.raises(ValueError, match="why"):
        HowListed.in_full("")
    with pytest.raises(ValueError, match="indexes_reread"):
        HowListed.by_journal(indexes_reread=-1)


def test_a_transfer_queue_listing_stopped_before_its_end_is_not_said_to_have_listed() -> None:
    """The sidecar's shutdown stops a listing at its next request (Interrupted): the sweep's report must
    not say the partition was listed. Its first step is the store's interruptible pause, before any
    request to TQ: nothing of TQ is reached here."""
    from tq_gc.errors import Interrupted
    from tq_gc.stores.transferqueue.listing import PartitionListing
    from tq_gc.stores.transferqueue.pacing import Pacer

    def stopped(_seconds: float) -> None:
        raise Interrupted("asked to stop")

    def pacer() -> Pacer:
        return Pacer.starting_small(2000, 0.005, 0.25)

    listing = PartitionListing(None, None, None, lambda: None, pacer, stopped)  # type: ignore[arg-type]
    with pytest.raises(Interrupted):
        listing.keys(PARTITION, 0.0)
    assert listing.take_listings() == {}
