"""Listing a partition of the job's TransferQueue in short, paced requests, over the controller's actor
handle: its global indexes (in pages, index_range.py), then the keys of each window of them
(kv_retrieve_keys, or on the controller's actor thread: key_windows.py), and for `rows` their tags
(kv_retrieve_meta). kv_list, the one request that lists a whole partition, holds the controller O(N)
on its one thread: these hold it a few milliseconds each, a duty cycle's pause between (pacing.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from tq_gc.listings import HowListed
from tq_gc.row_sizes import RowSizes
from tq_gc.rows import Tags
from tq_gc.stores.transferqueue.clearing import retrieve_meta
from tq_gc.stores.transferqueue.index_range import IndexRanges
from tq_gc.stores.transferqueue.journalled_keys import (
    JOURNAL_OFF,
    WITH_TAGS,
    ChangeJournal,
    JournalledKeys,
    JournalSettings,
)
from tq_gc.stores.transferqueue.key_windows import ControllerKeys
from tq_gc.stores.transferqueue.pacing import Pacer
from tq_gc.stores.transferqueue.requests import OP_KEYS, OP_META, TqRequests
from tq_gc.stores.transferqueue.rows import ListedPass


class PartitionListing:
    """The store's listings. `wait_for_quiet` waits for the controller's quiet moment before a request;
    `pacer` makes a fresh Pacer for each listing; `sleep` sleeps unless the store was interrupted
    (Interrupted then)."""

    def __init__(
        self,
        requests: TqRequests,
        index_ranges: IndexRanges,
        controller_keys: ControllerKeys,
        wait_for_quiet: Callable[[], object],
        pacer: Callable[[], Pacer],
        sleep: Callable[[float], None],
    ) -> None:
        self._requests = requests
        self._index_ranges = index_ranges
        self._controller_keys = controller_keys
        self._wait_for_quiet = wait_for_quiet
        self._pacer = pacer
        self._sleep = sleep
        # {partition: {key: bytes}} of the rows the last listing of each read a size for (key windows)
        self._sizes: dict[str, Mapping[str, int]] = {}
        # The partitions whose tag listings read sizes too (None: all of them)
        self.sized: frozenset[str] | None = None
        self.journalled: JournalledKeys | None = None  # keys() by the change journal (use_journal)
        self._how: dict[str, HowListed] = {}  # how each partition was listed since take_listings()

    def take_listings(self) -> dict[str, HowListed]:
        """{partition: how it was listed} since the last call (the last listing of each), and afresh."""
        taken, self._how = self._how, {}
        return taken

    def use_journal(self, journal: ChangeJournal, settings: JournalSettings) -> None:
        """List keys() by the change journal from now on (journalled_keys.py): the last full listing
        kept, the indexes touched since re-read into it."""
        self.journalled = JournalledKeys(
            journal, settings, self._read_window, lambda: self._controller_keys.size, self._listed_keys
        )

    def close_journal(self) -> None:
        """Leave the change journal, if used (the last holder puts the controller's methods back)."""
        if self.journalled is not None:
            self.journalled.journal.close()

    def _read_window(
        self, partition: str, window: list[int]
    ) -> tuple[list[str | None], list[int] | None] | None:
        """The keys and bytes of a window of indexes on the controller's actor thread, then the duty
        cycle's pause; None if that does not fit the controller."""
        read = self._controller_keys.read(partition, window)
        if read is None:
            return None
        keys, row_bytes, seconds = read
        self._sleep(self._pacer().pause_after(seconds))
        return keys, row_bytes

    def _listed_keys(self, partition: str) -> tuple[dict[str, int], Mapping[str, int]]:
        """A full listing of keys with no older listing's indexes reused: the journal's base."""
        keys = self._keys(partition, 0.0)
        return keys, self._sizes[partition]

    def sizes(self, partition: str) -> Mapping[str, int]:
        """{key: bytes} of the rows of `partition`'s last `keys` listing whose size the controller's field
        metadata gave (read in the same key windows); empty where none was read."""
        return self._sizes.get(partition, {})

    def rows(self, partition: str) -> dict[str, Tags]:
        """Every keyed row with its tags, as kv_list would, in two passes over the partition's global
        indexes, in windows.

        1. The indexes, then per window the keys of those indexes (kv_retrieve_keys) and at once their
           tags (kv_retrieve_meta, matched to the keys by global index: a key re-created in between
           under another index is left out).
        2. The indexes again, and per window their keys only; the tags of any (key, index) the first pass
           did not see.

        A row present for the whole of either pass is listed: so is every row present for the whole
        listing, and a reference moved make-before-break from one row to another during it (the old row
        lives through pass 1, or else the new one was written before pass 2 began). kv_list's single
        snapshot gave that, and tags sources count on it. Rows written or deleted during the listing may
        be in or out.
        """
        pacer = self._pacer()
        self._sleep(0)
        rows: dict[str, Tags] = {}
        sizes: dict[str, int] = {}
        first_pass = ListedPass()
        for window in self._index_windows(partition, pacer):
            owners, keys_seconds = self._keys_of(partition, window, pacer)
            tags_seconds = self._add_tags(partition, owners, rows, first_pass)
            self._add_sizes(partition, owners, sizes)
            self._sleep(pacer.after(max(keys_seconds, tags_seconds)))
        for window in self._index_windows(partition, pacer):
            owners, keys_seconds = self._keys_of(partition, window, pacer)
            tags_seconds = self._add_tags(partition, first_pass.not_in(owners), rows, None)
            self._sleep(pacer.after(max(keys_seconds, tags_seconds)))
        self._sizes[partition] = {key: size for key, size in sizes.items() if key in rows}
        self._how[partition] = HowListed.in_full(WITH_TAGS)
        return rows

    def _add_sizes(self, partition: str, owners: dict[int, str], sizes: dict[str, int]) -> None:
        """The bytes of `owners`' rows ({index: key}) into `sizes`, read on the controller's actor thread
        (the key windows' function, beside the job's requests) where it fits: a tags source's partition
        is listed through kv_retrieve_keys, which carries no sizes. A key whose index changed since is
        left out."""
        if not owners or self._controller_keys.size is None:
            return
        if self.sized is not None and partition not in self.sized:
            return
        read = self._controller_keys.read(partition, list(owners))
        if read is None:
            return
        keys, row_bytes, _ = read
        if row_bytes is None:
            return
        for index, key, size in zip(owners, keys, row_bytes, strict=True):
            if key is not None and key == owners[index] and size >= 0:
                sizes[key] = size

    def keys(self, partition: str, reuse_seconds: float) -> dict[str, int]:
        """{key: global index} of every keyed row, in one pass of paced windows: the partition's
        global indexes, then the keys of each window of KeyWindows.size, read on the controller's actor
        thread beside the job's requests (key_windows.py; where that does not fit, kv_retrieve_keys
        of the pacer's windows, ~2 ms held for 2,000 indexes).
        A row present for the whole pass is listed; one written during it at an index of a window
        already read is not (a tags source needs rows' second pass; a swept partition does not: the row
        is seen by the next sweep). No tags: no kv_retrieve_meta, which copies each row's.
        Within `reuse_seconds` of the last listing, the indexes it had: a row put since at an index it
        did not have waits for a later listing, and a row it had keeps its index while it lives, so its
        first-seen record stays (a tags source's listing always asks again).
        With the change journal (use_journal), the last full listing and the indexes touched since."""
        if self.journalled is None:
            keys, how = self._keys(partition, reuse_seconds), HowListed.in_full(JOURNAL_OFF)
        else:
            keys, self._sizes[partition], how = self.journalled.keys(partition)
        self._how[partition] = how  # a listing that raised is not said to have listed
        return keys

    def _keys(self, partition: str, reuse_seconds: float) -> dict[str, int]:
        pacer = self._pacer()
        self._sleep(0)
        keys: dict[str, int] = {}
        sizes = RowSizes(keys)  # its keys are the windows' keys, all of them in `keys`
        for window in self._index_windows(partition, pacer, reuse_seconds, beside_requests=True):
            owners, seconds, window_keys, row_bytes = self._sized_keys_of(partition, window, pacer)
            pacer.adapt(seconds)  # (then paused)
            listed_before = len(keys)
            keys.update((key, index) for index, key in owners.items())
            sizes.add(window_keys, row_bytes, relisted=len(keys) - listed_before < len(owners))
        self._sizes[partition] = sizes
        return keys

    def _index_windows(
        self, partition: str, pacer: Pacer, reuse_seconds: float = 0.0, beside_requests: bool = False
    ) -> Iterator[list[int]]:
        """The partition's global indexes, ascending, in windows of the pacer's current size; with
        `beside_requests`, of KeyWindows.size while the controller's actor thread answers them."""
        indexes = self._index_ranges.indexes(
            partition, lambda seconds: self._sleep(pacer.pause_after(seconds)), reuse_seconds
        )
        start = 0
        while start < len(indexes):
            size = (beside_requests and self._controller_keys.size) or pacer.window
            window = indexes[start : start + size].tolist()
            start += len(window)
            yield window

    def _keys_of(self, partition: str, window: list[int], pacer: Pacer) -> tuple[dict[int, str], float]:
        """({global index: key} of the window's indexes that have a key now, the request's seconds), by
        kv_retrieve_keys in a quiet moment, then the duty cycle's pause."""
        owners, seconds, _, _ = self._sized_keys_of(partition, window, pacer, beside_requests=False)
        return owners, seconds

    def _sized_keys_of(
        self, partition: str, window: list[int], pacer: Pacer, beside_requests: bool = True
    ) -> tuple[dict[int, str], float, list[str | None], list[int] | None]:
        """As _keys_of, on the controller's actor thread if that fits (`beside_requests`), and with the
        key of each of the window's indexes (None where it has none) and each one's bytes (-1 unknown;
        None where the controller gave no sizes)."""
        read = self._controller_keys.read(partition, window) if beside_requests else None
        row_bytes = None
        if read is None:
            self._wait_for_quiet()
            started = time.perf_counter()
            keys = self._requests.call(
                OP_KEYS,
                f"kv_retrieve_keys of {len(window)} indexes in {partition!r}",
                self._requests.client.async_kv_retrieve_keys(global_indexes=window, partition_id=partition),
            )
            seconds = time.perf_counter() - started
        else:
            keys, row_bytes, seconds = read
        self._sleep(pacer.pause_after(seconds))
        owners = {index: key for index, key in zip(window, keys, strict=True) if key is not None}
        return owners, seconds, keys, row_bytes

    def _add_tags(
        self, partition: str, owners: dict[int, str], rows: dict[str, Tags], listed: ListedPass | None
    ) -> float:
        """Read the tags of `owners` ({index: key}, ascending indexes) into rows, and each row into
        `listed` if given; return the request's seconds. A key whose index changed since `owners` was
        read is left out: it was deleted (and maybe re-created) in between. In a quiet moment."""
        if not owners:
            return 0.0
        self._wait_for_quiet()
        started = time.perf_counter()
        meta = self._requests.call(
            OP_META,
            f"kv_retrieve_meta of {len(owners)} keys in {partition!r}",
            retrieve_meta(self._requests, partition, list(owners.values())),
        )
        for index, tags in zip(meta.global_indexes, meta.custom_meta, strict=True):
            key = owners.get(index)
            if key is not None:
                rows[key] = tags
                if listed is not None:
                    listed.add(index, key)
        return time.perf_counter() - started
