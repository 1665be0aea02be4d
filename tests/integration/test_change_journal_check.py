"""The change journal's check mode on a real TransferQueue (journal_check.py): each listing that re-read
only what changed is followed by a full listing and compared; what the journal missed shows as a
difference, what the job changed between the two reads does not."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.testbed import tuned_cli
from tq_gc.config import TransferQueueConfig
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.journal_check import JournalCheck
from tq_gc.stores.transferqueue.journalled_keys import JournalledKeys, JournalSettings
from tq_gc.stores.transferqueue.pacing import FixedPacing

from support.logger_state import tq_gc_logger_restored

pytestmark = pytest.mark.ray

QUICK = FixedPacing(quiet_ms=0)


def checked_store(address: str, records: list[dict[str, Any]]) -> tuple[TransferQueueRowStore, JournalCheck]:
    check = JournalCheck(records.append)
    store = TransferQueueRowStore.attach(
        TransferQueueConfig(ray_address=address), fixed=QUICK, change_journal=JournalSettings(check=check)
    )
    return store, check


def journalled(store: TransferQueueRowStore) -> JournalledKeys:
    found = store._listing.journalled
    assert found is not None
    return found


def test_each_journalled_listing_is_compared_with_a_full_one_and_agrees(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    records: list[dict[str, Any]] = []
    put_rows(tq_partition, [f"k{i}" for i in range(20)])
    store, check = checked_store(ray_cluster.address, records)
    with store:
        store.list_keys(tq_partition)  # the base: a full listing, nothing to compare
        assert (check.full_listings, check.compared) == (1, 0)
        store.list_keys(tq_partition)
        tq.kv_clear(["k3", "k4"], tq_partition)
        put_rows(tq_partition, ["new1", "new2", "new3"], {"t": 1})  # two of them at the freed indexes
        keys = store.list_keys(tq_partition)
    assert "new3" in keys and "k3" not in keys
    assert (check.compared, check.differed, check.not_compared, check.full_listings) == (2, 0, 0, 1)
    assert [r["event"] for r in records] == ["full", "compared", "compared"]
    assert records[-1]["rows"] == records[-1]["full_rows"] == 21


def test_rows_the_journal_missed_are_differences(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    records: list[dict[str, Any]] = []
    put_rows(tq_partition, ["a", "b", "c"])
    store, check = checked_store(ray_cluster.address, records)
    with store:
        listed = store.list_keys(tq_partition)
        # The kept listing as if a put and a clear had gone unrecorded: "b" never seen, a ghost row kept.
        kept = journalled(store)._kept[tq_partition]
        kept.forget([listed["b"]])
        ghost_index = max(listed.values()) + 1000
        kept.add([ghost_index], ["ghost"], [16])
        store.list_keys(tq_partition)
    assert (check.compared, check.differed) == (1, 1)
    differences = records[-1]["differences"]
    assert [d["index"] for d in differences] == sorted([listed["b"], ghost_index])
    assert {d["index"]: d["journalled"] for d in differences}[ghost_index] == ["ghost", 16]


def test_rows_the_job_changes_between_the_two_listings_are_excused(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """The job clears and puts while the journalled listing and the full one run: they may disagree on
    those rows, never on the others."""
    records: list[dict[str, Any]] = []
    put_rows(tq_partition, [f"k{i}" for i in range(200)])
    store, check = checked_store(ray_cluster.address, records)
    with store:
        store.list_keys(tq_partition)
        for round_number in range(5):
            cleared = [f"k{i}" for i in range(round_number * 20, round_number * 20 + 20)]

            def job(cleared: list[str] = cleared, round_number: int = round_number) -> None:
                tq.kv_clear(cleared, tq_partition)
                put_rows(tq_partition, [f"n{round_number}-{i}" for i in range(30)])

            thread = threading.Thread(target=job)
            thread.start()
            try:
                store.list_keys(tq_partition)
            finally:
                thread.join(timeout=120)
            assert not thread.is_alive()
    assert check.compared + check.not_compared == 5 and check.compared >= 1
    assert check.differed == 0, [r for r in records if r.get("differed")]


def test_the_testbed_cli_lists_by_the_journal_and_appends_its_checks_to_the_file(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, tmp_path: Path
) -> None:
    """tools/testbed/tuned_cli.py's --journal-checks-to, as the soak's CLI sweeper runs it: a CLI run's
    one listing is the journal's full base, recorded with the process that made it."""
    put_rows(tq_partition, ["a", "b"])
    config = tmp_path / "tq-gc.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "namespace": f"journal-check-{tq_partition}",
                "state_url": "memory://",
                "transfer_queue": {"ray_address": ray_cluster.address},
                "scope": [{"partition": tq_partition, "all_keys": True}],
            }
        )
    )
    checks = tmp_path / "checks.jsonl"
    with tq_gc_logger_restored():
        code = tuned_cli.main(["--journal-checks-to", str(checks), "--", "sweep", "--config", str(config)])
    assert code == 0
    [record] = [json.loads(line) for line in checks.read_text().splitlines()]
    assert (record["event"], record["partition"], record["pid"]) == ("full", tq_partition, os.getpid())
