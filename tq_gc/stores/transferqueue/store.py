"""The real row store: a running training job's TransferQueue (TQ), reached through its Ray cluster.

Attaching (never creating, never closing the job's TQ) and joining its Ray cluster: attach.py and
tq_gc/ray_cluster.py. `close()` closes our own client, and disconnects from Ray only if `attach()`
connected this process; it never kills an actor. The TQ facts it relies on: __init__.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from tq_gc.config import TransferQueueConfig, redact_url
from tq_gc.errors import Interrupted, StoreUnavailable, TransferQueueNotFound
from tq_gc.footprint import Leftovers, StorageFill
from tq_gc.listings import HowListed
from tq_gc.ray_cluster import join_ray
from tq_gc.rows import Identity, Tags
from tq_gc.stores.base import RowStore, keys_with_indexes
from tq_gc.stores.transferqueue.attach import (
    controller_instance,
    find_controller,
    open_client,
    probe_controller,
    refuse_another_tq,
)
from tq_gc.stores.transferqueue.claim import TqClaim
from tq_gc.stores.transferqueue.clearing import clear_batch_if_unchanged, clear_keys, snapshot
from tq_gc.stores.transferqueue.controller_fit import ControllerFit, fit_since, skip_misfits
from tq_gc.stores.transferqueue.controller_function import ControllerFunction
from tq_gc.stores.transferqueue.delete_batches import DeleteBatches
from tq_gc.stores.transferqueue.index_range import DEFAULT_INDEX_PAGING, IndexPaging, IndexRanges
from tq_gc.stores.transferqueue.internals import (
    INDEX_PAGES,
    KEY_WINDOWS,
    QUIET_WAITS,
    Probe,
    RequestThreadWatch,
)
from tq_gc.stores.transferqueue.journalled_keys import ChangeJournal, JournalSettings
from tq_gc.stores.transferqueue.key_windows import DEFAULT_KEY_WINDOWS, ControllerKeys, KeyWindows
from tq_gc.stores.transferqueue.leftovers import audit_leftovers
from tq_gc.stores.transferqueue.listing import PartitionListing
from tq_gc.stores.transferqueue.pacing import DUTY_CYCLE, FIXED_PACING, REQUEST_TARGET_MS, FixedPacing, Pacer
from tq_gc.stores.transferqueue.quiet import NO_WAIT, QuietMoments, QuietSettings, QuietWait
from tq_gc.stores.transferqueue.requests import (
    OP_KV_LIST,
    OP_PARTITIONS,
    REQUEST_TIMEOUT_SECONDS,
    WAIT_DUTY,
    TqRequests,
)
from tq_gc.stores.transferqueue.rows import identities_of, paced_batches
from tq_gc.stores.transferqueue.storage_units import read_storage_fill

logger = logging.getLogger(__name__)


class TransferQueueRowStore(RowStore):
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
        request_target_ms: float = REQUEST_TARGET_MS,
        duty_cycle: float = DUTY_CYCLE,
        index_range_reuse_seconds: float = 0.0,
        index_paging: IndexPaging = DEFAULT_INDEX_PAGING,
        key_windows: KeyWindows = DEFAULT_KEY_WINDOWS,
        quiet: QuietSettings | None = None,
        controller_fit: ControllerFit | None = None,
        instance: str | None = None,
        change_journal: JournalSettings | None = None,
    ) -> None:
        """Wrap an attached `transfer_queue.TransferQueueClient`; the store closes it in `close()`.
        With the controller's actor handle, `list_rows` reads in short paced windows (else one `kv_list`)
        and, with `quiet`, each request waits for a quiet moment of the controller. With `controller_fit`
        (the probe's at attach), a function run on the controller that does not fit it is never tried.
        `instance` (controller_instance() at attach) tells ensure_attached() whether the job's controller
        is still that one. With `change_journal` (off by default), list_keys re-reads only what changed
        since its last full listing (journalled_keys.py)."""
        self._client = client
        self._controller = controller
        self._instance = instance
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
        self._listing = PartitionListing(
            self._requests,
            self._index_ranges,
            self._controller_keys,
            self.wait_for_quiet,
            self._pacer,
            self._sleep_unless_interrupted,
        )
        self._delete_batches = DeleteBatches(
            request_batch, self._quiet, lambda: self._sleep_unless_interrupted(0), self.wait_for_quiet
        )
        self._fit = controller_fit
        if controller_fit is not None:
            skip_misfits(controller_fit, self._controller_functions())
        self._interrupted = threading.Event()
        self._claims: list[TqClaim] = []  # handed out by claim(), ended by close()
        if controller is not None and change_journal is not None:
            self._listing.use_journal(
                ChangeJournal(self._requests, controller, change_journal), change_journal
            )

    @classmethod
    def attach(
        cls,
        config: TransferQueueConfig,
        *,
        duty_cycle: float = DUTY_CYCLE,
        request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
        index_paging: IndexPaging = DEFAULT_INDEX_PAGING,
        key_windows: KeyWindows = DEFAULT_KEY_WINDOWS,
        request_thread_watch: RequestThreadWatch | None = None,
        controller_probe: Probe | None = None,
        fixed: FixedPacing = FIXED_PACING,
        change_journal: JournalSettings | None = None,
    ) -> TransferQueueRowStore:
        """Attach to the TQ of the Ray cluster at `config.ray_address`, paced by `duty_cycle` (the process's
        choice) and `fixed` (the batch, the quiet moments: tests and benches set their own). Never creates
        a TQ. `change_journal`: list_keys by the controller's change journal (off by default).

        A process already connected to Ray (the sidecar actor, a test) uses that connection and ignores
        `ray_address`. Raises ConfigError when no Ray cluster answers at the address, TransferQueueNotFound
        when the cluster has no TQ controller, StoreUnavailable when the controller is there but cannot
        be reached, ConfigError when it runs another TQ than this process (before any request).
        """
        import ray

        owns_ray_connection = join_ray(config.ray_address)
        try:
            controller = find_controller(config.ray_address)
            fit = probe_controller(controller, REQUEST_TIMEOUT_SECONDS, controller_probe)
            refuse_another_tq(fit, config.ray_address)
            instance = controller_instance(controller, REQUEST_TIMEOUT_SECONDS)
            client = open_client(controller, REQUEST_TIMEOUT_SECONDS)
        except BaseException:
            if owns_ray_connection:
                ray.shutdown()
            raise
        return cls(
            client,
            request_batch=fixed.batch,
            ray_address=config.ray_address,
            owns_ray_connection=owns_ray_connection,
            request_timeout_seconds=request_timeout_seconds,
            controller=controller,
            request_target_ms=fixed.request_target_ms,
            duty_cycle=duty_cycle,
            index_range_reuse_seconds=fixed.index_range_reuse_seconds,
            index_paging=index_paging,
            key_windows=key_windows,
            quiet=QuietSettings(*fixed.quiet_seconds(), request_thread_watch, fixed.job_idle_ms / 1000),
            controller_fit=fit,
            instance=instance,
            change_journal=change_journal,
        )

    # ---- RowStore ----

    def partitions(self) -> list[str]:
        partitions = self._client.async_get_partition_list()
        return list(self._requests.call(OP_PARTITIONS, "get_partition_list", partitions))

    def list_rows(self, partition: str) -> dict[str, Tags]:
        """Every keyed row with its tags, as kv_list would: in two passes of short paced requests over the
        partition's global indexes (listing.py), or one kv_list without the controller's actor handle.
        A row present for the whole listing is listed."""
        if self._controller is None:
            whole = self._client.async_kv_list(partition)
            listing = self._requests.call(OP_KV_LIST, f"kv_list({partition!r})", whole)
            return dict(listing.get(partition) or {})
        return self._listing.rows(partition)

    def list_keys(self, partition: str) -> dict[str, int]:
        """{key: global index} of every keyed row present for the whole listing, without tags: one pass
        of paced windows (listing.py). Without the controller's actor handle: kv_list, then the listed
        rows' global indexes."""
        if self._controller is None:
            return keys_with_indexes(self, partition)
        return self._listing.keys(partition, self._index_range_reuse_seconds)

    def row_sizes(self, partition: str) -> Mapping[str, int]:
        """{key: bytes} of the rows the last listing of `partition` sized (field_sizes.py)."""
        return self._listing.sizes(partition)

    def size_partitions(self, partitions: Collection[str]) -> None:
        self._listing.sized = frozenset(partitions)

    def storage_fill(self) -> StorageFill:
        """Each storage unit's capacity and active keys (GET_METRICS, storage_units.py)."""
        return read_storage_fill(self._client)

    def storage_leftovers(self) -> Leftovers:
        """Storage cells no partition owns (a dropped storage clear's): leftovers.py. O(rows), on demand."""
        if self._controller is None:
            raise StoreUnavailable("the storage leftovers' audit needs the TransferQueue controller's handle")
        return audit_leftovers(self._controller)

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
            found.update(identities_of(*snapshot(self._requests, partition, batch)))
            self._pause(pacer, time.perf_counter() - started)
        return found

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        """In batches of the pacer's window (request_batch/4 to request_batch rows, starting at the top:
        each batch costs round trips of its own), each a re-check and a clear back to back, then the duty
        cycle's pause. Each of the two holds the job's requests for as long as it takes: a pair slower
        than two targets halves the next batch. (With a nested field TQ rescans every row's shape on each
        clear, O(partition) whatever the batch: the batches stay at the floor, the pauses grow.)"""
        deleted: set[str] = set()
        pacer = self._pacer()
        pacer.window = pacer.max_window  # the first pair tells at once if that is too much
        for batch in paced_batches(list(expected), pacer):
            started = time.perf_counter()
            deleted.update(clear_batch_if_unchanged(self._requests, partition, batch, expected, len(deleted)))
            seconds = time.perf_counter() - started
            pacer.adapt(seconds / 2)  # two requests: the re-check and the clear
            pause_seconds = 0.0 if self._job_idle() else pacer.pause_after(seconds)
            time.sleep(pause_seconds)
            self._requests.log.waited(WAIT_DUTY, pause_seconds)
        return deleted

    def delete(self, partition: str, keys: Sequence[str]) -> None:
        """Delete unconditionally, like tq.kv_clear (tests and tools; the collector never does)."""
        unique = list(dict.fromkeys(keys))
        size = self._request_batch
        for done in range(0, len(unique), size):
            clear_keys(self._requests, partition, unique[done : done + size], done, len(unique))

    def delete_batches(self, partition: str, keys: Sequence[str]) -> Iterator[list[str]]:
        """Batches each one re-check and clear of delete_if_unchanged, each yielded after a quiet moment's
        wait: it so comes before the sweep's re-check, never between it and the clear (delete_batches.py).
        A store asked to stop (interrupt) raises Interrupted before the next batch. First, the check that
        the controller is still the one attached to."""
        self.ensure_attached()
        yield from self._delete_batches(keys)

    def wait_for_quiet(self) -> QuietWait:
        """Wait until the controller's request thread has been idle FixedPacing.quiet_ms (20 ms; at
        most 250 ms): delete_batches waits so before yielding each batch, so that the batch's
        requests come between two of the job's bursts without widening the re-check's window.
        The store's listings and identity reads wait so before each of their requests by themselves (an
        index page or key window inside its own call to the controller: QuietMoments.first)."""
        return NO_WAIT if self._quiet is None else self._quiet.wait()

    def describe(self) -> dict[str, str]:
        """For `tq-gc check`: the controller's TQ, and which of the functions tq-gc runs inside it fit it
        (a function that does not uses TQ's own call instead)."""
        if self._controller is None:
            return {"TransferQueue controller functions": "no controller handle: TQ's own calls only"}
        fit = fit_since(self._fit, self._controller_functions())
        return {"TransferQueue controller functions": fit.describe()}

    def _controller_functions(self) -> dict[str, ControllerFunction]:
        functions = {INDEX_PAGES: self._index_ranges.pages, KEY_WINDOWS: self._controller_keys.reader}
        if self._quiet is not None:
            functions[QUIET_WAITS] = self._quiet.function
        return functions

    def claim(self, holder: str, where: str) -> TqClaim:
        """A new hold on this TQ's claim (claim.py), for one sweeper; it ends when this store closes."""
        claim = TqClaim(where, holder, self._ray_address)
        self._claims.append(claim)
        return claim

    def ensure_attached(self) -> None:
        """StoreUnavailable if the controller this store attached to is no longer the job's: none by
        TQ's name (it died), or another one (the job replaced it: a new TQ, whose global indexes start
        afresh). A store made without the controller's handle cannot tell, and does nothing."""
        if self._controller is None or self._instance is None:
            return
        try:
            live = find_controller(self._ray_address)
        except TransferQueueNotFound as exc:
            raise StoreUnavailable(f"the TransferQueue controller attached to is gone: {exc}") from exc
        if controller_instance(live, self._requests.timeout_seconds) != self._instance:
            raise StoreUnavailable(
                "the job's TransferQueue controller was replaced since tq-gc attached to it"
            )

    def identity_space(self) -> str | None:
        """The controller instance attached to (its Ray actor id and process): global indexes are
        that controller's."""
        return self._instance

    def interrupt(self) -> None:
        """Make a listing or an identity read in progress, and every later one, raise Interrupted before
        its next request (its pauses end at once). A delete call runs to its end: the rows it cleared
        must reach the audit's confirmation."""
        self._interrupted.set()

    def take_request_stats(self) -> dict[str, list[float]]:
        """{operation: [seconds of each request]} since the last call, as this client saw them (the
        wait for the controller included), and start afresh. The collector reads it once per sweep."""
        return self._requests.log.take()

    def take_pacing_stats(self) -> dict[str, float]:
        """{WAIT_QUIET, WAIT_DUTY: seconds} the store waited between its requests since the last call
        (for quiet moments; in the duty cycle's pauses), and start afresh."""
        return self._requests.log.take_waits()

    def take_listings(self) -> dict[str, HowListed]:
        return self._listing.take_listings()  # by the change journal, or in full and why

    # ---- lifecycle ----

    def close(self) -> None:
        """End the claims handed out, close our client, leave Ray if attach() joined it. Kills nothing."""
        import ray

        claims, self._claims = self._claims, []
        for claim in claims:
            claim.release()
        self._listing.close_journal()
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
            f"TransferQueueRowStore(ray_address={redact_url(self._ray_address)!r}, "
            f"request_batch={self._request_batch}, closed={self._requests.closed})"
        )

    # ---- internals ----

    def _pacer(self) -> Pacer:
        return Pacer.starting_small(self._request_batch, self._request_target_seconds, self._duty_cycle)

    def _pause(self, pacer: Pacer, latency_seconds: float) -> None:
        """The duty cycle's pause after a request of `latency_seconds`, the window adapted to it. The next
        request waits for its quiet moment (quiet.py) by itself."""
        self._sleep_unless_interrupted(pacer.after(latency_seconds))

    def _job_idle(self) -> bool:
        """The latest quiet moment's wait found the job idle (quiet.py): no duty cycle's pause."""
        return self._quiet is not None and self._quiet.last.job_idle

    def _sleep_unless_interrupted(self, seconds: float) -> None:
        """The duty cycle's pause (recorded as such), cut short by interrupt(); none while the job is
        idle (the latest quiet moment's wait found it so: quiet.py)."""
        if self._job_idle():
            seconds = 0.0
        started = time.perf_counter()
        interrupted = self._interrupted.wait(max(0.0, seconds))
        if seconds > 0:
            self._requests.log.waited(WAIT_DUTY, time.perf_counter() - started)
        if interrupted:
            raise Interrupted("asked to stop: the row store stopped reading between two requests")
