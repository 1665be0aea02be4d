"""tq-gc's own TransferQueue requests: each with a deadline, and timed by operation (what each one held
up the job's controller for: it serves one request at a time). The row store makes them; the collector
takes the timings once a sweep."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from array import array
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from tq_gc.errors import StoreUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Every controller request carries this deadline: TQ's controller socket has none, so a dead or wedged
# controller would hang a sweep (and the sidecar's scheduler) forever. Generous: kv_list of a
# 100k-key partition takes well under a second.
REQUEST_TIMEOUT_SECONDS = 60.0
# Beyond the deadline, how long we wait for the client's event loop itself (a wedged loop thread).
LOOP_GRACE_SECONDS = 5.0

# Operation names of tq-gc's own requests, as take_request_stats() and the metrics report them.
OP_INDEX_RANGE = "get_partition_index_range"

OP_KEYS = "kv_retrieve_keys"

OP_META = "kv_retrieve_meta"

OP_CLEAR = "clear_samples"

OP_PARTITIONS = "get_partition_list"

OP_KV_LIST = "kv_list"

TQ_REQUEST_OPS = (OP_INDEX_RANGE, OP_KEYS, OP_META, OP_CLEAR, OP_PARTITIONS, OP_KV_LIST)


class RequestLog:
    """The duration of each of tq-gc's requests, by operation, until taken. Thread-safe: requests are
    recorded on the client's event loop thread, taken from the sweeping thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, list[float]] = {}

    def record(self, op: str, seconds: float) -> None:
        with self._lock:
            self._seconds.setdefault(op, []).append(seconds)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            taken, self._seconds = self._seconds, {}
        return taken


class TqRequests:
    """Requests through one attached TransferQueueClient: run on the client's own event loop with a
    deadline, timed into `log`, and refused once `close()` has closed the client."""

    def __init__(self, client: Any, timeout_s: float = REQUEST_TIMEOUT_SECONDS) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.log = RequestLog()
        self.closed = False
        self._close_lock = threading.Lock()
        self._ranges: dict[str, tuple[float, array[int]]] = {}  # partition -> (monotonic, indexes)

    def call(self, op: str | None, what: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run one client coroutine on the client's own loop, with a deadline, and record its duration
        under `op` (None: the coroutine records its requests itself). Errors -> StoreUnavailable."""
        if self.closed:
            coro.close()
            raise StoreUnavailable(f"TransferQueue {what}: the row store is closed")
        # TransferQueueClient's sync methods are this same call without a deadline (`_run_coroutine`).
        # The deadline is enforced inside the loop (wait_for), so a request that runs out of time is
        # cancelled and finished there, and its pooled socket discarded, before we return.
        timeout_s = self.timeout_s
        timed = coro if op is None else self.timed(op, coro)
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(timed, timeout_s), self.client._loop)
        try:
            return future.result(timeout=timeout_s + LOOP_GRACE_SECONDS)
        except TimeoutError as exc:
            future.cancel()
            raise StoreUnavailable(
                f"TransferQueue {what}: no answer within {timeout_s:g} s (controller dead or overloaded?)"
            ) from exc
        except Exception as exc:
            raise StoreUnavailable(f"TransferQueue {what} failed: {exc}") from exc

    async def timed(self, op: str, awaitable: Awaitable[T]) -> T:
        """Await one request, recording how long it took under `op`."""
        started = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.log.record(op, time.perf_counter() - started)

    def index_range(self, controller: Any, partition: str, reuse_s: float = 0.0) -> array[int]:
        """Every global index of the partition (and its pre-allocated ones), ascending, from the
        controller actor's main thread: its request thread keeps serving the job meanwhile, but the
        actor copies the whole index set holding the GIL (60-290 ms at 1M rows). With `reuse_s`, the
        indexes this got for the partition less than `reuse_s` ago, if it did. An unknown partition
        has none."""
        import ray

        cached = self._ranges.get(partition)
        if reuse_s > 0 and cached is not None and time.monotonic() - cached[0] < reuse_s:
            return cached[1]
        started = time.perf_counter()
        what = f"TransferQueue {OP_INDEX_RANGE}({partition!r})"
        try:
            ref = controller.get_partition_index_range.remote(partition)
            listed: list[int] = ray.get(ref, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            raise StoreUnavailable(
                f"{what}: no answer within {self.timeout_s:g} s (controller dead or overloaded?)"
            ) from exc
        except Exception as exc:
            raise StoreUnavailable(f"{what} failed: {exc}") from exc
        finally:
            self.log.record(OP_INDEX_RANGE, time.perf_counter() - started)
        listed.sort()
        indexes = array("q", listed)  # 8 bytes an index, not a list's 36
        self._ranges[partition] = (time.monotonic(), indexes)
        return indexes

    def close(self) -> bool:
        """Close the client (best effort); True if this call closed it, False if it was closed before."""
        with self._close_lock:
            if self.closed:
                return False
            self.closed = True
        try:
            self.client.close()
        except Exception as exc:  # closing is best effort: the sweep's outcome is already decided
            logger.warning("closing the TransferQueue client failed: %s", exc)
        return True
