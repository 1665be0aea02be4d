"""The change journal on a real TransferQueue (change_journal.py, journalled_keys.py): installed in the
job's controller only when asked, removed by close(), and a full listing whenever it cannot be trusted
(an overflow, another epoch, load_checkpoint). The equivalence of its listings with full ones under
random puts, clears and reuses: test_change_journal_equivalence.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tq_gc.config import TransferQueueConfig
from tq_gc.listings import HowListed, ListedBy
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.change_journal import JOURNAL_ATTRIBUTE, MUTATIONS, journal_uninstaller
from tq_gc.stores.transferqueue.journalled_keys import (
    ANOTHER_JOURNAL,
    FIRST_LISTING,
    JOURNAL_OFF,
    WHOLE_PARTITION,
    WITH_TAGS,
    JournalledKeys,
    JournalSettings,
)
from tq_gc.stores.transferqueue.pacing import FixedPacing
from tq_gc.stores.transferqueue.requests import OP_JOURNAL, OP_KEYS_WINDOW

pytestmark = pytest.mark.ray

QUICK = FixedPacing(quiet_ms=0)
JOURNAL = JournalSettings()


def controller() -> Any:
    import ray

    return ray.get_actor("TransferQueueController", namespace="transfer_queue")


def on_controller(function: Any) -> Any:
    import ray

    return ray.get(controller().__ray_call__.remote(function), timeout=60)


def instance_attributes(names: list[str]) -> list[str]:
    """Which of `names` the controller instance has as its own attributes (wrappers, not its class's)."""
    return on_controller(lambda c: sorted(name for name in names if name in c.__dict__))


def wrapped_names() -> list[str]:
    import transfer_queue

    return sorted(MUTATIONS[transfer_queue.__version__])


def attach(address: str, settings: JournalSettings | None = JOURNAL) -> TransferQueueRowStore:
    return TransferQueueRowStore.attach(
        TransferQueueConfig(ray_address=address), fixed=QUICK, change_journal=settings
    )


def journalled(store: TransferQueueRowStore) -> JournalledKeys:
    found = store._listing.journalled
    assert found is not None
    return found


@pytest.fixture
def full_store(ray_cluster: Any, tq: Any) -> Iterator[TransferQueueRowStore]:
    with attach(ray_cluster.address, None) as store:
        yield store


def full_listing(store: TransferQueueRowStore, partition: str) -> tuple[dict[str, int], dict[str, int]]:
    return store.list_keys(partition), dict(store.row_sizes(partition))


def listed_in_full(store: TransferQueueRowStore, partition: str) -> str:
    """Why the store's last listing of `partition` was a full one, as the report says (take_listings)."""
    how = store.take_listings()[partition]
    assert how.by is ListedBy.FULL and how.why is not None, how
    return how.why


def test_without_the_journal_nothing_is_installed_in_the_controller(
    full_store: TransferQueueRowStore, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ["a", "b"])
    assert set(full_store.list_keys(tq_partition)) == {"a", "b"}
    assert full_store.take_listings() == {tq_partition: HowListed.in_full(JOURNAL_OFF)}
    assert set(full_store.list_rows(tq_partition)) == {"a", "b"}
    assert full_store.take_listings() == {tq_partition: HowListed.in_full(WITH_TAGS)}
    assert full_store._listing.journalled is None
    assert on_controller(lambda c: JOURNAL_ATTRIBUTE in c.__dict__) is False
    assert instance_attributes(wrapped_names()) == []


def test_close_puts_the_controllers_own_methods_back(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    names = wrapped_names()
    store = attach(ray_cluster.address)
    try:
        put_rows(tq_partition, ["a"])
        store.list_keys(tq_partition)
        assert instance_attributes(names) == names
        assert on_controller(lambda c: JOURNAL_ATTRIBUTE in c.__dict__) is True
    finally:
        store.close()
    assert instance_attributes(names) == []
    assert on_controller(lambda c: JOURNAL_ATTRIBUTE in c.__dict__) is False
    put_rows(tq_partition, ["b"])  # the job's requests go on, through TQ's own methods
    assert set(tq.kv_list(tq_partition)[tq_partition]) == {"a", "b"}


def test_two_stores_share_one_journal_and_the_last_to_leave_removes_it(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    names = wrapped_names()
    put_rows(tq_partition, ["a"])
    first, second = attach(ray_cluster.address), attach(ray_cluster.address)
    try:
        first.list_keys(tq_partition)
        second.list_keys(tq_partition)
        first.close()
        assert instance_attributes(names) == names
    finally:
        first.close()
        second.close()
    assert instance_attributes(names) == []


def test_nothing_changed_costs_one_journal_read_and_a_change_only_its_window(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, full_store: TransferQueueRowStore
) -> None:
    put_rows(tq_partition, [f"k{i}" for i in range(50)])
    with attach(ray_cluster.address) as store:
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert listed_in_full(store, tq_partition) == FIRST_LISTING
        store.take_request_stats()
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        stats = store.take_request_stats()
        assert len(stats.get(OP_JOURNAL, [])) == 1 and OP_KEYS_WINDOW not in stats
        assert store.take_listings() == {tq_partition: HowListed.by_journal(indexes_reread=0)}
        tq.kv_clear(["k3"], tq_partition)
        put_rows(tq_partition, ["new"], {"t": 1})
        store.take_request_stats()
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert len(store.take_request_stats()[OP_KEYS_WINDOW]) == 1
        how = store.take_listings()[tq_partition]
        assert how.by is ListedBy.JOURNAL and how.indexes_reread in (1, 2), how  # k3's, new's (maybe k3's)
        assert journalled(store).full_listings == 1


def test_an_overflow_makes_the_next_listing_a_full_one(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, full_store: TransferQueueRowStore
) -> None:
    put_rows(tq_partition, ["a", "b"])
    with attach(ray_cluster.address, JournalSettings(capacity_indexes=4)) as store:
        store.list_keys(tq_partition)
        put_rows(tq_partition, [f"k{i}" for i in range(6)])  # 6 indexes, three times (put, data, tags)
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert journalled(store).full_listings == 2
        assert listed_in_full(store, tq_partition) == "the journal overflowed"
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert journalled(store).full_listings == 2


def test_another_epoch_makes_the_next_listing_a_full_one(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, full_store: TransferQueueRowStore
) -> None:
    put_rows(tq_partition, ["a", "b"])
    with attach(ray_cluster.address) as store:
        store.list_keys(tq_partition)
        epoch = journalled(store).journal.epoch
        assert epoch is not None
        uninstall = journal_uninstaller()
        assert on_controller(lambda c: uninstall(c, epoch)) is True  # another holder took it away
        put_rows(tq_partition, ["c"])  # unrecorded
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert journalled(store).full_listings == 2
        assert listed_in_full(store, tq_partition) == ANOTHER_JOURNAL
        assert journalled(store).journal.epoch not in (None, epoch)


def test_a_controller_checkpoint_loaded_makes_the_next_listing_a_full_one(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    full_store: TransferQueueRowStore,
    tmp_path: Path,
) -> None:
    put_rows(tq_partition, ["a", "b", "c"])
    checkpoint = str(tmp_path / "controller.pkl")
    with attach(ray_cluster.address) as store:
        store.list_keys(tq_partition)
        client = store._requests.client
        store._requests.call(None, "save", client.async_save_controller_checkpoint(checkpoint))
        tq.kv_clear(["b"], tq_partition)
        assert set(store.list_keys(tq_partition)) == {"a", "c"}
        # The controller's rows as saved: "b" is back (its data is not: a key without data).
        store._requests.call(None, "load", client.async_load_controller_checkpoint(checkpoint))
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert "load_checkpoint" in listed_in_full(store, tq_partition)
        assert set(store.list_keys(tq_partition)) == {"a", "b", "c"}
        assert journalled(store).full_listings == 2


def test_a_tq_version_not_read_gets_no_journal_and_full_listings_said_once(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tq_gc.stores.transferqueue import change_journal

    monkeypatch.setattr(change_journal, "MUTATIONS", {"0.0.1": change_journal.MUTATIONS["0.1.9"]})
    put_rows(tq_partition, ["a"])
    with attach(ray_cluster.address) as store, caplog.at_level("WARNING"):
        store.list_keys(tq_partition)
        put_rows(tq_partition, ["b"])
        assert set(store.list_keys(tq_partition)) == {"a", "b"}
        assert journalled(store).full_listings == 2
        why = listed_in_full(store, tq_partition)
        assert why.startswith("no change journal") and "was not read" in why, why
        assert on_controller(lambda c: JOURNAL_ATTRIBUTE in c.__dict__) is False
    refusals = [r for r in caplog.records if "no change journal" in r.getMessage()]
    assert len(refusals) == 1 and "was not read" in refusals[0].getMessage()


def test_a_whole_partition_cleared_or_a_kept_listing_too_old_makes_a_full_one_and_says_so(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, full_store: TransferQueueRowStore
) -> None:
    put_rows(tq_partition, ["a", "b"])
    with attach(ray_cluster.address) as store:
        store.list_keys(tq_partition)
        tq.get_client().clear_partition(tq_partition)
        put_rows(tq_partition, ["c"])
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert listed_in_full(store, tq_partition) == WHOLE_PARTITION
    with attach(ray_cluster.address, JournalSettings(full_listing_every_seconds=0.0)) as store:
        store.list_keys(tq_partition)
        store.list_keys(tq_partition)
        assert "a full listing at least every 0 s" in listed_in_full(store, tq_partition)


def test_a_journal_that_cannot_record_never_fails_the_jobs_request_and_is_distrusted(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, full_store: TransferQueueRowStore
) -> None:
    """The journal lives in the job's controller: whatever goes wrong in it, the job's put and clear
    still succeed, and the journal is never trusted again (full listings from then on)."""
    put_rows(tq_partition, ["a", "b"])
    with attach(ray_cluster.address) as store:
        store.list_keys(tq_partition)
        attribute = JOURNAL_ATTRIBUTE

        def break_the_journal(c: Any) -> None:  # entries that cannot be appended to, nor cleared
            c.__dict__[attribute]["entries"] = ()

        on_controller(break_the_journal)
        put_rows(tq_partition, ["c", "d"])
        tq.kv_clear(["a"], tq_partition)
        assert full_listing(store, tq_partition) == full_listing(full_store, tq_partition)
        assert "could not record" in listed_in_full(store, tq_partition)
        assert set(store.list_keys(tq_partition)) == {"b", "c", "d"}
        assert journalled(store).full_listings == 3
