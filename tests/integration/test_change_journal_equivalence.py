"""The proof of the change journal (journalled_keys.py): on a real TransferQueue, under random puts of new
keys and of existing ones (other shapes, other tags), tag-only puts, clears, clears then puts (freed
global indexes reissued), new partitions and whole partitions cleared, the journalled listing of every
partition after every step equals a fresh full listing: the same keys at the same global indexes, the same
sizes."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tq_gc.config import TransferQueueConfig
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.journalled_keys import JournalSettings
from tq_gc.stores.transferqueue.pacing import FixedPacing

pytestmark = pytest.mark.ray

QUICK = FixedPacing(quiet_ms=0)
MAX_PARTITIONS = 3
# Keys named from a small pool, so that puts hit existing keys and clears hit listed ones.
KEY_POOL = [f"r{i}" for i in range(24)]
keys_strategy = st.lists(st.sampled_from(KEY_POOL), min_size=1, max_size=8, unique=True)
tags_strategy = st.sampled_from([{}, {"v": 1}, {"v": 2, "owner": "x"}])
width_strategy = st.sampled_from([4, 8])  # a field's shape per put: two widths make it nested


def put(tq: Any, partition: str, keys: list[str], width: int | None, tags: dict[str, Any]) -> None:
    """kv_batch_put of `keys`, with a float32 field of `width` per row (None: tags only)."""
    import torch
    from tensordict import TensorDict

    fields = None if width is None else TensorDict({"x": torch.zeros(len(keys), width)}, batch_size=len(keys))
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=fields, tags=[dict(tags) for _ in keys])


class JournalMachine(RuleBasedStateMachine):
    tq: Any = None
    journalled: TransferQueueRowStore
    full: TransferQueueRowStore
    listings = 0  # journalled listings checked, over every example

    def __init__(self) -> None:
        super().__init__()
        self.run_id = uuid.uuid4().hex[:8]
        self.partitions: list[str] = []
        self.keys: dict[str, set[str]] = {}  # what this machine put and did not clear, per partition
        self._add_partition()

    def _add_partition(self) -> str:
        partition = f"tqgc-journal-{self.run_id}-{len(self.partitions)}"
        self.partitions.append(partition)
        self.keys[partition] = set()
        return partition

    def _partition(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.partitions), label="partition")

    @rule(data=st.data(), keys=keys_strategy, width=width_strategy, tags=tags_strategy)
    def put_rows(self, data: st.DataObject, keys: list[str], width: int, tags: dict[str, Any]) -> None:
        """New keys, existing ones (another shape, other tags), or both."""
        partition = self._partition(data)
        put(self.tq, partition, keys, width, tags)
        self.keys[partition].update(keys)

    @rule(data=st.data(), keys=keys_strategy, tags=tags_strategy)
    def put_tags_only(self, data: st.DataObject, keys: list[str], tags: dict[str, Any]) -> None:
        partition = self._partition(data)
        put(self.tq, partition, keys, None, tags)
        self.keys[partition].update(keys)

    @rule(data=st.data(), keys=keys_strategy)
    def clear(self, data: st.DataObject, keys: list[str]) -> None:
        partition = self._partition(data)
        self.tq.kv_clear(keys, partition)
        self.keys[partition].difference_update(keys)

    @rule(data=st.data(), cleared=keys_strategy, put_keys=keys_strategy, width=width_strategy)
    def clear_then_put(
        self, data: st.DataObject, cleared: list[str], put_keys: list[str], width: int
    ) -> None:
        """The freed global indexes are reissued to the next put, in this partition or another."""
        partition, other = self._partition(data), self._partition(data)
        self.tq.kv_clear(cleared, partition)
        self.keys[partition].difference_update(cleared)
        put(self.tq, other, put_keys, width, {"v": 3})
        self.keys[other].update(put_keys)

    @precondition(lambda self: len(self.partitions) < MAX_PARTITIONS)
    @rule(keys=keys_strategy)
    def new_partition(self, keys: list[str]) -> None:
        partition = self._add_partition()
        put(self.tq, partition, keys, 4, {})
        self.keys[partition].update(keys)

    @rule(data=st.data())
    def clear_partition(self, data: st.DataObject) -> None:
        partition = self._partition(data)
        self.full._requests.call(
            None, "clear_partition", self.full._requests.client.async_clear_partition(partition)
        )
        self.keys[partition].clear()

    @rule(data=st.data(), cleared=keys_strategy, put_keys=keys_strategy, width=width_strategy)
    def listing_raced_by_the_job(
        self, data: st.DataObject, cleared: list[str], put_keys: list[str], width: int
    ) -> None:
        """A journalled listing while the job clears and puts: whatever it missed, the next one sees (its
        journal seq is read before its re-reads)."""
        partition = self._partition(data)
        self.keys[partition].difference_update(cleared)
        self.keys[partition].update(put_keys)
        job = threading.Thread(target=self.clear_then_put_in, args=(partition, cleared, put_keys, width))
        job.start()
        try:
            self.journalled.list_keys(partition)
        finally:
            job.join(timeout=120)
        assert not job.is_alive()

    def clear_then_put_in(self, partition: str, cleared: list[str], put_keys: list[str], width: int) -> None:
        self.tq.kv_clear(cleared, partition)
        put(self.tq, partition, put_keys, width, {"v": 4})

    @invariant()
    def journalled_listing_equals_a_full_one(self) -> None:
        for partition in self.partitions:
            keys = self.journalled.list_keys(partition)
            JournalMachine.listings += 1
            sizes = dict(self.journalled.row_sizes(partition))
            full_keys = self.full.list_keys(partition)
            assert set(full_keys) == self.keys[partition]
            assert keys == full_keys, partition
            assert sizes == dict(self.full.row_sizes(partition)), partition

    def teardown(self) -> None:
        for partition in self.partitions:
            keys = list(self.full.list_keys(partition))
            if keys:
                self.tq.kv_clear(keys, partition)


def test_every_journalled_listing_equals_a_full_listing(ray_cluster: Any, tq: Any) -> None:
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with (
        TransferQueueRowStore.attach(config, fixed=QUICK, change_journal=JournalSettings()) as journalled,
        TransferQueueRowStore.attach(config, fixed=QUICK) as full,
    ):
        JournalMachine.tq, JournalMachine.journalled, JournalMachine.full = tq, journalled, full
        run_state_machine_as_test(
            JournalMachine,
            settings=settings(
                max_examples=12,
                stateful_step_count=12,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            ),
        )
        listing = journalled._listing.journalled
        assert listing is not None
        # Each partition's first listing is a full one, and so is one after its partition was cleared:
        # most of the others re-read only what changed (else the machine proved nothing of the journal).
        assert listing.full_listings < JournalMachine.listings / 2, (
            listing.full_listings,
            JournalMachine.listings,
        )
