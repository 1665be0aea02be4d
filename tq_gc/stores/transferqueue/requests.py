"""tq-gc's own TransferQueue requests: each with a deadline, and timed by operation (what each one held
up the job's controller for: it serves one request at a time). The row store makes them; the collector
takes the timings once a sweep."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from tq_gc.errors import StoreUnavailable
from tq_gc.stores.transferqueue.client_internals import client_loop

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Every controller request carries this deadline: TQ's controller socket has none, so a dead or wedged
# controller would hang a sweep (and the sidecar's scheduler) forever. Generous: kv_list of a
# 100k-key partition takes well under a second.
REQUEST_TIMEOUT_SECONDS = 60.0
# Beyond the deadline, how long we wait for the client's event loop itself (a wedged loop thread).
LOOP_GRACE_SECONDS = 5.0

# Operation names of tq-gc's own requests, as take_request_stats() and the metrics report them.
OP_INDEX_PAGE = "partition_index_page"

OP_INDEX_RANGE = "get_partition_index_range"

OP_KEYS_WINDOW = "partition_keys_window"

OP_KEYS = "kv_retrieve_keys"

OP_META = "kv_retrieve_meta"

OP_CLEAR = "clear_samples"

OP_PARTITIONS = "get_partition_list"

OP_KV_LIST = "kv_list"

OP_JOURNAL = "change_journal"

TQ_REQUEST_OPS = (
    OP_INDEX_PAGE, OP_INDEX_RANGE, OP_KEYS_WINDOW, OP_KEYS, OP_META, OP_CLEAR, OP_PARTITIONS, OP_KV_LIST,
    OP_JOURNAL,
)  # fmt: skip

# What the store's pacing waits for between its requests, as take_pacing_stats() and the metrics name it:
# the controller's quiet moment (quiet.py), the duty cycle's pause (pacing.py).
WAIT_QUIET = "quiet_wait"
WAIT_DUTY = "duty_pause"
PACING_WAITS = (WAIT_QUIET, WAIT_DUTY)


class RequestLog:
    """The duration of each of tq-gc's requests, by operation, until taken. Thread-safe: requests are
    recorded on the client's event loop thread, taken from the sweeping thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, list[float]] = {}
        self._waited_seconds: dict[str, float] = {}

    def record(self, op: str, seconds: float) -> None:
        with self._lock:
            self._seconds.setdefault(op, []).append(seconds)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            taken, self._seconds = self._seconds, {}
        return taken

    def waited(self, wait: str, seconds: float) -> None:
        """Add a pacing wait between requests (WAIT_QUIET, WAIT_DUTY): not a request, no one held up."""
        if seconds > 0:
            with self._lock:
                self._waited_seconds[wait] = self._waited_seconds.get(wait, 0.0) + seconds

    def take_waits(self) -> dict[str, float]:
        """{wait: its seconds in all} since the last call, and afresh."""
        with self._lock:
            taken, self._waited_seconds = self._waited_seconds, {}
        return taken


class TqRequests:
    """Requests through one attached TransferQueueClient: run on the client's own event loop with a
    deadline, timed into `log`, and refused once `close()` has closed the client."""

    def __init__(self, client: Any, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> None:
        self.client = client
        self.timeout_seconds = timeout_seconds
        self.log = RequestLog()
        self.closed = False
        self._close_lock = threading.Lock()

    def call(self, op: str | None, what: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run one client coroutine on the client's own loop, with a deadline, and record its duration
        under `op` (None: the coroutine records its requests itself). Errors -> StoreUnavailable."""
        if self.closed:
            coro.close()
            raise StoreUnavailable(f"TransferQueue {what}: the row store is closed")
        # TransferQueueClient's sync methods are this same call without a deadline (`_run_coroutine`).
        # The deadline is enforced inside the loop (wait_for), so a request that runs out of time is
        # cancelled and finished there, and its pooled socket discarded, before we return.
        timeout_seconds = self.timeout_seconds
        timed = coro if op is None else self.timed(op, coro)
        loop = client_loop(self.client)
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(timed, timeout_seconds), loop)
        try:
            return future.result(timeout=timeout_seconds + LOOP_GRACE_SECONDS)
        except TimeoutError as exc:
            future.cancel()
            raise StoreUnavailable(
                f"TransferQueue {what}: no answer within {timeout_seconds:g} s "
                "(controller dead or overloaded?)"
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

    def actor_call(self, op: str | None, what: str, actor: Any, method: str, *args: Any) -> Any:
        """Call a method of a TQ actor (the controller) through Ray, with the deadline, timed under `op`
        (None: not a request the job waits for, not timed). Errors -> StoreUnavailable, the actor's own
        exception as its cause."""
        import ray

        started = time.perf_counter()
        try:
            return ray.get(getattr(actor, method).remote(*args), timeout=self.timeout_seconds)
        except ray.exceptions.GetTimeoutError as exc:
            raise StoreUnavailable(
                f"TransferQueue {what}: no answer within {self.timeout_seconds:g} s (controller dead or "
                "overloaded?)"
            ) from exc
        except Exception as exc:
            raise StoreUnavailable(f"TransferQueue {what} failed: {exc}") from exc
        finally:
            if op is not None:
                self.log.record(op, time.perf_counter() - started)

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
