"""The real row store: a running training job's TransferQueue (TQ), reached through its Ray cluster.

Attaching (never creating, never closing the job's TQ) and joining its Ray cluster: attach.py and
tq_gc/ray_cluster.py. `close()` closes our own client, and disconnects from Ray only if `attach()`
connected this process; it never kills an actor.

TQ facts this relies on (transferqueue 0.1.9, 0.1.10 and 0.1.11, read from their source and checked on a
real TQ of each; every internal it reads is in internals.py):

- `kv_retrieve_meta(keys, pid, create=False)` answers with a `BatchMeta` that carries no keys: unknown
  keys are dropped, the others keep their request order; `custom_meta` is the rows' tags, aligned with
  `global_indexes`. An unknown partition answers an empty BatchMeta and is not created.
- `kv_retrieve_keys(indexes, pid)` answers the key of each index, None for an index with no key (or
  not in the partition); an unknown partition is an error.
- The controller serves one request at a time, so each answer is a consistent snapshot, and every
  request holds up the job's own requests for as long as it takes. `kv_list` is one request for the
  whole partition: O(N) on that one thread (measured at 1M rows on 2 busy cores: the controller held
  0.8-1.2 s). No request pages it, and none returns a partition's global indexes in bounded time
  (`get_production_status` sorts them all on the request thread: held 120-160 ms at 1M). The
  controller actor's Ray method `get_partition_index_range(pid)` returns them (unsorted, with the
  partition's pre-allocated indexes) from the actor's main thread, beside the request thread, but copies
  the whole set in one C call holding the GIL (60-290 ms at 1M): the job's requests wait for that. So
  the store reads them in pages of the global index space (index_range.py), and falls back to
  `get_partition_index_range` where the pages do not fit. `list_rows()` builds on these: see there.
- `tq.kv_clear` is `kv_retrieve_meta(create=False)` then `clear_samples(meta)`: not atomic, TQ has no
  compare-and-delete. `delete_if_unchanged()` reads the rows' identities and clears exactly the rows it
  matched (the same BatchMeta, narrowed), back to back: the narrowest window TQ allows. In that window
  a row cleared by someone else can have its global index reissued; the controller's clear is scoped
  to the partition, but SimpleStorage's is by global index only (a TQ limitation, same for kv_clear).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from tq_gc.config import TransferQueueConfig
from tq_gc.errors import Interrupted
from tq_gc.ray_cluster import join_ray
from tq_gc.rows import Identity, Tags
from tq_gc.stores.base import keys_with_indexes
from tq_gc.stores.transferqueue.attach import (
    find_controller,
    open_client,
    probe_controller,
    refuse_another_tq,
)
from tq_gc.stores.transferqueue.controller_function import ControllerFunction
from tq_gc.stores.transferqueue.index_range import DEFAULT_INDEX_PAGING, IndexPaging, IndexRanges
from tq_gc.stores.transferqueue.internals import (
    INDEX_PAGES,
    KEY_WINDOWS,
    QUIET_WAITS,
    ControllerFit,
    Probe,
    QuietWaiter,
)
from tq_gc.stores.transferqueue.key_windows import DEFAULT_KEY_WINDOWS, ControllerKeys, KeyWindows
from tq_gc.stores.transferqueue.pacing import Pacer, smallest_window
from tq_gc.stores.transferqueue.quiet import NO_WAIT, Quiet, QuietMoments, QuietWait
from tq_gc.stores.transferqueue.requests import (
    OP_CLEAR,
    OP_KEYS,
    OP_KV_LIST,
    OP_META,
    OP_PARTITIONS,
    REQUEST_TIMEOUT_SECONDS,
    TqRequests,
)
from tq_gc.stores.transferqueue.rows import ListedPass, batches, identities_of, paced_batches, unchanged

logger = logging.getLogger(__name__)


# identities(): rounds to pin down which key each index belongs to when some keys are gone (see there).
IDENTITY_ROUNDS = 3


class TransferQueueRowStore:
    """RowStore over a running job's TransferQueue. Get one with `attach()`; `close()` when done."""

    def __init__(
        self,
        client: Any,
        *,
        request_batch: int,
        ray_address: str = "",
        owns_ray_connection: bool = False,
        request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
        controller: Any = None,
        request_target_ms: float = 10.0,
        duty_cycle: float = 1.0,
        index_range_reuse_seconds: float = 0.0,
        index_paging: IndexPaging = DEFAULT_INDEX_PAGING,
        key_windows: KeyWindows = DEFAULT_KEY_WINDOWS,
        quiet: Quiet | None = None,
        controller_fit: ControllerFit | None = None,
    ) -> None:
        """Wrap an attached `transfer_queue.TransferQueueClient`; the store closes it in `close()`.

        With the controller's actor handle, `list_rows` reads in short paced windows; without it, in one
        `kv_list`. With it and `quiet`, each request waits for a quiet moment of the controller. With
        `controller_fit` (what the probe at attach found), a function run on the controller that does
        not fit it is never tried: TQ's own call from the start."""
        self._client = client
        self._controller = controller
        self._request_batch = request_batch
        self._request_target_seconds = request_target_ms / 1000
        self._duty_cycle = duty_cycle
        self._index_range_reuse_seconds = index_range_reuse_seconds
        self._ray_address = ray_address
        self._owns_ray_connection = owns_ray_connection
        self._requests = TqRequests(client, request_timeout_seconds)
        self._quiet = None
        if controller is not None and quiet is not None and quiet.quiet_seconds > 0:
            self._quiet = QuietMoments(controller, self._requests, quiet)
            # One copy of a small partition's index set holds the controller 5-20 ms at 100k rows: longer
            # than what a quiet moment has left. Pages of the space hold it ~0.5 ms each.
            index_paging = replace(index_paging, copy_max=0)
        self._index_ranges = IndexRanges(controller, self._requests, index_paging, self._quiet)
        self._controller_keys = ControllerKeys(controller, self._requests, key_windows, self._quiet)
        self._fit = controller_fit
        if controller_fit is not None:
            self._skip_misfits(controller_fit)
        self._interrupted = threading.Event()

    def _skip_misfits(self, fit: ControllerFit) -> None:
        functions = self._controller_functions()
        for name, reason in fit.misfits.items():
            function = functions.get(name)
            if function is not None:
                function.does_not_fit(name, f"found at attach: {reason}")

    @classmethod
    def attach(
        cls,
        config: TransferQueueConfig,
        *,
        request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
        index_paging: IndexPaging = DEFAULT_INDEX_PAGING,
        key_windows: KeyWindows = DEFAULT_KEY_WINDOWS,
        quiet_waiter: QuietWaiter | None = None,
        controller_probe: Probe | None = None,
    ) -> TransferQueueRowStore:
        """Attach to the TQ of the Ray cluster at `config.ray_address`. Never creates a TQ.

        A process already connected to Ray (the sidecar actor, a test) uses that connection and
        ignores `ray_address`. Raises ConfigError when no Ray cluster answers at the address,
        TransferQueueNotFound when the cluster has no TQ controller, StoreUnavailable when the
        controller is there but cannot be reached, ConfigError when it runs another TQ than this
        process (before any request: attach.py).
        """
        import ray

        owns_ray_connection = join_ray(config.ray_address, config.ray_namespace)
        try:
            controller = find_controller(config.ray_address)
            fit = probe_controller(controller, REQUEST_TIMEOUT_SECONDS, controller_probe)
            refuse_another_tq(fit, config.ray_address)
            client = open_client(controller, REQUEST_TIMEOUT_SECONDS)
        except BaseException:
            if owns_ray_connection:
                ray.shutdown()
            raise
        return cls(
            client,
            request_batch=config.request_batch,
            ray_address=config.ray_address,
            owns_ray_connection=owns_ray_connection,
            request_timeout_seconds=request_timeout_seconds,
            controller=controller,
            request_target_ms=config.request_target_ms,
            duty_cycle=config.duty_cycle,
            index_range_reuse_seconds=config.index_range_reuse_seconds,
            index_paging=index_paging,
            key_windows=key_windows,
            quiet=Quiet(config.quiet_ms / 1000, config.quiet_wait_max_ms / 1000, quiet_waiter),
            controller_fit=fit,
        )

    # ---- RowStore ----

    def partitions(self) -> list[str]:
        partitions = self._client.async_get_partition_list()
        return list(self._requests.call(OP_PARTITIONS, "get_partition_list", partitions))

    def list_rows(self, partition: str) -> dict[str, Tags]:
        """Every keyed row with its tags, as kv_list would, in short requests: two passes over the
        partition's global indexes, in windows.

        1. The indexes (in pages, index_range.py), then per window the keys of
           those indexes (kv_retrieve_keys) and at once their tags (kv_retrieve_meta, matched to the
           keys by global index: a key re-created in between under another index is left out).
        2. The indexes again, and per window their keys only; the tags of any (key, index) the first pass
           did not see.

        A row present for the whole of either pass is listed: so is every row present for the whole
        listing, and a reference moved make-before-break from one row to another during it (the old row
        lives through pass 1, or else the new one was written before pass 2 began). kv_list's single
        snapshot gave that, and tags sources count on it. Rows written or deleted during the listing may
        be in or out. Each request is paced (pacing.py).
        """
        if self._controller is None:
            whole = self._client.async_kv_list(partition)
            listing = self._requests.call(OP_KV_LIST, f"kv_list({partition!r})", whole)
            return dict(listing.get(partition) or {})
        pacer = self._pacer()
        self._sleep_unless_interrupted(0)
        rows: dict[str, Tags] = {}
        first_pass = ListedPass()
        for window in self._index_windows(partition, pacer):
            owners, keys_seconds = self._keys_of(partition, window, pacer)
            tags_seconds = self._add_tags(partition, owners, rows, first_pass)
            self._pause(pacer, max(keys_seconds, tags_seconds))
        for window in self._index_windows(partition, pacer):
            owners, keys_seconds = self._keys_of(partition, window, pacer)
            tags_seconds = self._add_tags(partition, first_pass.not_in(owners), rows, None)
            self._pause(pacer, max(keys_seconds, tags_seconds))
        return rows

    def list_keys(self, partition: str) -> dict[str, int]:
        """{key: global index} of every keyed row, in one pass of paced windows: the partition's
        global indexes, then the keys of each window of KeyWindows.size, read on the controller's actor
        thread beside the job's requests (key_windows.py; where that does not fit, kv_retrieve_keys
        of the pacer's windows, ~2 ms held for 2,000 indexes).
        A row present for the whole pass is listed; one written during it at an index of a window
        already read is not (a tags source needs list_rows' second pass; a swept partition does not:
        the row is seen by the next sweep). No tags: no kv_retrieve_meta, which copies each row's.
        Within index_range_reuse_seconds of the last listing, the indexes it had: a row put since at an
        index it did not have waits for a later listing, and a row it had keeps its index while it lives,
        so its first-seen record stays (a tags source's list_rows always asks again).
        Without the controller's actor handle: kv_list, then the listed rows' global indexes."""
        if self._controller is None:
            return keys_with_indexes(self, partition)
        pacer = self._pacer()
        self._sleep_unless_interrupted(0)
        keys: dict[str, int] = {}
        reuse_seconds = self._index_range_reuse_seconds
        for window in self._index_windows(partition, pacer, reuse_seconds, beside_requests=True):
            owners, seconds = self._keys_of(partition, window, pacer, beside_requests=True)  # then paused
            pacer.adapt(seconds)
            keys.update((key, index) for index, key in owners.items())
        return keys

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        """Current identity of each key that exists. A key that changes while we ask may be left out.

        Leaving a key out is the safe answer: the collector keeps a row whose identity it cannot confirm.
        """
        found: dict[str, Identity] = {}
        pacer = self._pacer()
        self._sleep_unless_interrupted(0)
        for batch in paced_batches(list(dict.fromkeys(keys)), pacer):
            self.wait_for_quiet()
            started = time.perf_counter()
            found.update(identities_of(*self._snapshot(partition, batch)))
            self._pause(pacer, time.perf_counter() - started)
        return found

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        """In batches of the pacer's window (request_batch/4 to request_batch rows, starting at the top:
        each batch costs round trips of its own), each a re-check and a clear back to back, then the
        duty cycle's pause. Each of the two holds the job's requests for
        as long as it takes: a pair slower than two targets halves the next batch. (With a nested field
        TQ rescans every row's shape on each clear, O(partition) whatever the batch: the batches then
        stay at the floor, and the pauses grow with the clears.)"""
        deleted: set[str] = set()
        pacer = self._pacer()
        pacer.window = pacer.max_window  # the first pair tells at once if that is too much
        for batch in paced_batches(list(expected), pacer):
            started = time.perf_counter()
            deleted.update(self._delete_batch_if_unchanged(partition, batch, expected, len(deleted)))
            seconds = time.perf_counter() - started
            pacer.adapt(seconds / 2)  # two requests: the re-check and the clear
            time.sleep(pacer.pause_after(seconds))
        return deleted

    def delete(self, partition: str, keys: Sequence[str]) -> None:
        """Delete unconditionally, like tq.kv_clear (tests and tools; the collector never does)."""
        unique = list(dict.fromkeys(keys))
        done = 0
        for batch in batches(unique, self._request_batch):
            what = f"kv_clear of {len(batch)} keys in {partition!r} (after {done} of {len(unique)})"
            meta = self._requests.call(OP_META, what, self._retrieve_meta(partition, batch))
            if meta.size > 0:
                self._requests.call(OP_CLEAR, what, self._client.async_clear_samples(meta))
            done += len(batch)

    def wait_for_quiet(self) -> QuietWait:
        """Wait until the controller's request thread has been idle transfer_queue.quiet_ms (at most
        quiet_wait_max_ms): the collector calls this before each delete batch's re-check, so that the
        batch's requests come between two of the job's bursts without widening the re-check's window.
        The store's listings and identity reads wait so before each of their requests by themselves (an
        index page or key window inside its own call to the controller: QuietMoments.first)."""
        return NO_WAIT if self._quiet is None else self._quiet.wait()

    def rows_per_delete(self) -> int:
        """The most rows a delete_if_unchanged call should carry (the collector's batches are no larger):
        while requests wait for quiet moments, request_batch/4, so that its re-check and clear fit in
        what is left of one (500 rows: ~2 + 3 ms held at 1M rows; 2,000: ~4 + 7 ms, measured
        alone); else request_batch."""
        if self._quiet is not None and self._quiet.fits:
            return smallest_window(self._request_batch)
        return self._request_batch

    def controller_fit(self) -> str:
        """For `tq-gc check`: the controller's TQ, and which of the functions tq-gc runs inside it fit it
        (a function that does not uses TQ's own call instead)."""
        if self._controller is None:
            return "no controller handle: TQ's own calls only"
        fit = self._fit or ControllerFit(None, None, {})
        found_since = {
            name: function.misfit
            for name, function in self._controller_functions().items()
            if function.misfit is not None and name not in fit.misfits
        }
        return ControllerFit(fit.tq_version, fit.request_types, {**fit.misfits, **found_since}).describe()

    def _controller_functions(self) -> dict[str, ControllerFunction]:
        functions = {INDEX_PAGES: self._index_ranges.pages, KEY_WINDOWS: self._controller_keys.reader}
        if self._quiet is not None:
            functions[QUIET_WAITS] = self._quiet.function
        return functions

    def interrupt(self) -> None:
        """Make a listing or an identity read in progress, and every later one, raise Interrupted before
        its next request (its pauses end at once). A delete call runs to its end: the rows it cleared
        must reach the audit's confirmation."""
        self._interrupted.set()

    def take_request_stats(self) -> dict[str, list[float]]:
        """{operation: [seconds of each request]} since the last call, as this client saw them (the
        wait for the controller included), and start afresh. The collector reads it once per sweep."""
        return self._requests.log.take()

    # ---- lifecycle ----

    def close(self) -> None:
        """Close our client; disconnect from Ray only if attach() connected. Idempotent. Kills nothing."""
        import ray

        if self._requests.close() and self._owns_ray_connection:
            ray.shutdown()

    def __enter__(self) -> TransferQueueRowStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"TransferQueueRowStore(ray_address={self._ray_address!r}, "
            f"request_batch={self._request_batch}, closed={self._requests.closed})"
        )

    # ---- internals ----

    def _pacer(self) -> Pacer:
        return Pacer.starting_small(self._request_batch, self._request_target_seconds, self._duty_cycle)

    def _pause(self, pacer: Pacer, latency_seconds: float) -> None:
        """The duty cycle's pause after a request of `latency_seconds`, the window adapted to it. The next
        request waits for its quiet moment (quiet.py) by itself."""
        self._sleep_unless_interrupted(pacer.after(latency_seconds))

    def _sleep_unless_interrupted(self, seconds: float) -> None:
        if self._interrupted.wait(max(0.0, seconds)):
            raise Interrupted("asked to stop: the row store stopped reading between two requests")

    def _index_windows(
        self, partition: str, pacer: Pacer, reuse_seconds: float = 0.0, beside_requests: bool = False
    ) -> Iterator[list[int]]:
        """The partition's global indexes, ascending, in windows of the pacer's current size; with
        `beside_requests`, of KeyWindows.size while the controller's actor thread answers them."""
        indexes = self._index_ranges.indexes(
            partition,
            lambda seconds: self._sleep_unless_interrupted(pacer.pause_after(seconds)),
            reuse_seconds,
        )
        start = 0
        while start < len(indexes):
            size = (beside_requests and self._controller_keys.size) or pacer.window
            window = indexes[start : start + size].tolist()
            start += len(window)
            yield window

    def _keys_of(
        self, partition: str, window: list[int], pacer: Pacer, beside_requests: bool = False
    ) -> tuple[dict[int, str], float]:
        """({global index: key} of the window's indexes that have a key now, the request's seconds),
        in a quiet moment, then the duty cycle's pause. `beside_requests`: on the controller's actor
        thread if that fits."""
        read = self._controller_keys.read(partition, window) if beside_requests else None
        if read is None:
            self.wait_for_quiet()
            started = time.perf_counter()
            keys = self._requests.call(
                OP_KEYS,
                f"kv_retrieve_keys of {len(window)} indexes in {partition!r}",
                self._client.async_kv_retrieve_keys(global_indexes=window, partition_id=partition),
            )
            seconds = time.perf_counter() - started
        else:
            keys, seconds = read
        self._sleep_unless_interrupted(pacer.pause_after(seconds))
        return {index: key for index, key in zip(window, keys, strict=True) if key is not None}, seconds

    def _add_tags(
        self, partition: str, owners: dict[int, str], rows: dict[str, Tags], listed: ListedPass | None
    ) -> float:
        """Read the tags of `owners` ({index: key}, ascending indexes) into rows, and each row into
        `listed` if given; return the request's seconds. A key whose index changed since `owners` was
        read is left out: it was deleted (and maybe re-created) in between. In a quiet moment."""
        if not owners:
            return 0.0
        self.wait_for_quiet()
        started = time.perf_counter()
        meta = self._requests.call(
            OP_META,
            f"kv_retrieve_meta of {len(owners)} keys in {partition!r}",
            self._retrieve_meta(partition, list(owners.values())),
        )
        for index, tags in zip(meta.global_indexes, meta.custom_meta, strict=True):
            key = owners.get(index)
            if key is not None:
                rows[key] = tags
                if listed is not None:
                    listed.add(index, key)
        return time.perf_counter() - started

    def _delete_batch_if_unchanged(
        self, partition: str, batch: list[str], expected: Mapping[str, Identity], done: int
    ) -> list[str]:
        what = f"re-check and clear of {len(batch)} rows in {partition!r}"
        cleared = self._requests.call(None, what, self._clear_if_unchanged(partition, batch, expected))
        if cleared is not None:  # the usual case: one round trip to the client's loop
            return cleared
        keys, meta = self._snapshot(partition, batch)
        # A row recreated (another index) or retagged since the plan saw it is not the row the
        # plan judged: it stays, and the collector counts it as recheck_saved.
        matched = unchanged(keys, meta, expected)
        if not matched:
            return []
        what = f"clear of {len(matched)} rows in {partition!r} (after {done} deleted in this call)"
        # select_samples deep-copies every row's tags: skip it when every row matched (the usual case).
        doomed = meta if len(matched) == len(keys) else meta.select_samples(matched)
        self._requests.call(OP_CLEAR, what, self._client.async_clear_samples(doomed))
        return [keys[i] for i in matched]

    async def _clear_if_unchanged(
        self, partition: str, keys: list[str], expected: Mapping[str, Identity]
    ) -> list[str] | None:
        """Snapshot, match and clear in one coroutine, back to back on the client's loop. None when
        some keys are gone (the snapshot is then not aligned with `keys`): the caller takes the long way."""
        meta = await self._requests.timed(OP_META, self._retrieve_meta(partition, keys))
        if meta.size != len(keys):
            return None
        matched = unchanged(keys, meta, expected)
        if matched:
            # select_samples deep-copies every row's tags: skip it when every row matched (the usual case).
            doomed = meta if len(matched) == len(keys) else meta.select_samples(matched)
            await self._requests.timed(OP_CLEAR, self._client.async_clear_samples(doomed))
        return [keys[i] for i in matched]

    def _snapshot(self, partition: str, keys: list[str]) -> tuple[list[str], Any]:
        """(keys, meta): the keys of `keys` that exist, and their BatchMeta, row i being keys[i], as one
        answer of the controller. Keys gone, or changed while we ask, are left out."""
        # The BatchMeta of kv_retrieve_meta carries no keys and drops unknown ones, so an answer shorter
        # than the request does not say which index is whose. Then we ask the key of each index
        # (kv_retrieve_keys) and ask again for exactly the keys still there: an answer as long as its
        # request is aligned with it, in one snapshot. A key deleted, recreated or created between two
        # rounds falls out of the request, and is reported absent: the caller keeps that row.
        wanted = keys
        for _ in range(IDENTITY_ROUNDS):
            meta = self._requests.call(
                OP_META,
                f"kv_retrieve_meta of {len(wanted)} keys in {partition!r}",
                self._retrieve_meta(partition, wanted),
            )
            if meta.size == len(wanted):
                return wanted, meta
            if meta.size == 0:
                return [], meta
            owners = self._requests.call(
                OP_KEYS,
                f"kv_retrieve_keys of {meta.size} indexes in {partition!r}",
                self._client.async_kv_retrieve_keys(
                    global_indexes=list(meta.global_indexes), partition_id=partition
                ),
            )
            still_there = {key for key in owners if key is not None}
            wanted = [key for key in wanted if key in still_there]
            if not wanted:
                return [], None
        logger.warning(
            "partition %r kept changing while its identities were read; %d keys reported absent",
            partition,
            len(wanted),
        )
        return [], None

    def _retrieve_meta(self, partition: str, keys: list[str]) -> Any:
        # create=False always: with create=True TQ registers the keys it does not know.
        return self._client.async_kv_retrieve_meta(keys=keys, partition_id=partition, create=False)
