"""The batches in which the TQ store hands a sweep its deletes (RowStore.delete_batches): sized so that
one re-check and clear fits a quiet moment of the controller, throttled to
transfer_queue.pacing.max_deletes_per_second, each yielded only after its waits. The sweep re-checks a
batch after it is yielded and clears it right after: so every wait here comes before the re-check,
never between the re-check and the clear (docs/safety.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from tq_gc.stores.base import batches_of
from tq_gc.stores.transferqueue.pacing import DeleteThrottle, smallest_window
from tq_gc.stores.transferqueue.quiet import QuietMoments


class DeleteBatches:
    """`request_batch`: the store's request size (transfer_queue.pacing.batch); `quiet`: its quiet moments
    (None: it does not wait for them); `sleep`: the store's sleep, which raises Interrupted once it is
    asked to stop; `wait_for_quiet`: the store's wait for a quiet moment."""

    def __init__(
        self,
        request_batch: int,
        max_deletes_per_second: float,
        quiet: QuietMoments | None,
        sleep: Callable[[float], None],
        wait_for_quiet: Callable[[], object],
    ) -> None:
        self._request_batch = request_batch
        self._throttle = DeleteThrottle(max_deletes_per_second)
        self._quiet = quiet
        self._sleep = sleep
        self._wait_for_quiet = wait_for_quiet

    def __call__(self, keys: Sequence[str]) -> Iterator[list[str]]:
        """`keys` in the plan's order, in batches of rows_per_batch(); before each, the throttle's wait,
        then the quiet moment's."""
        for batch in batches_of(keys, self.rows_per_batch()):
            self._sleep(self._throttle.wait_seconds(time.monotonic()))
            self._throttle.let_through(len(batch), time.monotonic())
            self._wait_for_quiet()
            yield batch

    def rows_per_batch(self) -> int:
        """While requests wait for quiet moments, request_batch/4, so that a batch's re-check and clear
        fit in what is left of one (500 rows: ~2 + 3 ms held at 1M rows; 2,000: ~4 + 7 ms, measured
        alone); else request_batch."""
        if self._quiet is not None and self._quiet.fits:
            return smallest_window(self._request_batch)
        return self._request_batch
