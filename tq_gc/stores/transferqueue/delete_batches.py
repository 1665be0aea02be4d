"""The batches in which the TQ store hands a sweep its deletes (RowStore.delete_batches): sized so that
one re-check and clear fits a quiet moment of the controller, each yielded only after that wait. The
sweep re-checks a batch after it is yielded and clears it right after: so every wait here comes before
the re-check, never between the re-check and the clear (docs/safety.md). The duty cycle's pause
(the one throttle, chosen where the process starts) follows each clear, in the store's
delete_if_unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from tq_gc.stores.transferqueue.pacing import smallest_window
from tq_gc.stores.transferqueue.quiet import QuietMoments


class DeleteBatches:
    """`request_batch`: the store's request size (FixedPacing.batch); `quiet`: its quiet moments
    (None: it does not wait for them); `stop_if_asked`: raises Interrupted once the store is asked to
    stop; `wait_for_quiet`: the store's wait for a quiet moment."""

    def __init__(
        self,
        request_batch: int,
        quiet: QuietMoments | None,
        stop_if_asked: Callable[[], None],
        wait_for_quiet: Callable[[], object],
    ) -> None:
        self._request_batch = request_batch
        self._quiet = quiet
        self._stop_if_asked = stop_if_asked
        self._wait_for_quiet = wait_for_quiet

    def __call__(self, keys: Sequence[str]) -> Iterator[list[str]]:
        """`keys` in the plan's order, in batches; before each, the check that the store was not asked to
        stop, then the quiet moment's wait, whose answer sizes the batch (rows_per_batch)."""
        done = 0
        while done < len(keys):
            self._stop_if_asked()
            self._wait_for_quiet()
            size = self.rows_per_batch()
            yield list(keys[done : done + size])
            done += size

    def rows_per_batch(self) -> int:
        """While requests wait for quiet moments, request_batch/4, so that a batch's re-check and clear
        fit in what is left of one (500 rows: ~2 + 3 ms held at 1M rows; 2,000: ~4 + 7 ms, measured
        alone); else, or when the latest wait found the job idle (quiet.py), request_batch."""
        quiet = self._quiet
        if quiet is not None and quiet.fits and not quiet.last.job_idle:
            return smallest_window(self._request_batch)
        return self._request_batch
