"""A partition's global indexes, read from the job's TransferQueue controller in bounded pages.

The windowed listing (transferqueue.py) needs a partition's global indexes first. TQ 0.1.11 has one call
that returns them, the controller actor's `get_partition_index_range`, and no bounded one: it copies the
partition's whole index set in single C calls, holding the controller's GIL for all of it (60-290 ms at 1M
rows), and the job's requests wait. Ray runs a closure on an actor (`__ray_call__`, a Ray DeveloperAPI):
the page reader below answers, for one span [start, stop) of the global index space, which of its indexes
are the partition's, by membership in TQ's own index set: Python code the interpreter hands the GIL
away from every switch interval, a fixed amount of work a page (16,384 lookups: ~0.5 ms in the
controller, 2-3 ms a round trip). It also answers the end of the space (TQ's index counter: every
index ever given out is below it) and the partition's size; a listing reads pages up to the end its
first answer gave, so every row present for the whole listing is in it. The pages cost the size of the
whole index space, every partition's, and a round trip each: a partition of at most `copy_max` indexes
(a staging partition beside a big one, or any of up to ~100k rows) is read in one copy, which then holds
the controller no longer than one of tq-gc's delete batches does (12-22 ms at 100k rows). While the
store's requests wait for the controller's quiet moments (quiet.py), that is longer than what one
has left, and the store reads every partition in pages (copy_max 0).

The reader reads TQ's internals (`index_manager`, internals.py), which another TQ version may lay out
otherwise: where the probe at attach finds it does not fit, or the first page does not fit
(controller_function.py), the store warns once and uses `get_partition_index_range` from then on. A
request that gets no answer is StoreUnavailable, as always.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from tq_gc.stores.transferqueue.controller_function import ControllerFunction, DoesNotFit
from tq_gc.stores.transferqueue.internals import INDEX_PAGES, PageReader, page_reader
from tq_gc.stores.transferqueue.quiet import QuietMoments
from tq_gc.stores.transferqueue.requests import OP_INDEX_PAGE, OP_INDEX_RANGE, TqRequests

logger = logging.getLogger(__name__)

# Indexes a page covers. Measured at 1M rows (2 cores): 16,384 lookups take the controller ~0.5 ms, a page
# 2.4 ms end to end, 62 pages 155 ms in all (the whole set at once: 86-216 ms, in one hold).
INDEX_PAGE_SPAN = 16_384

# The most indexes read in one copy rather than in pages. Measured at 100k rows: one copy 12-22 ms; 8
# pages 22 ms in all, and a sweep 25 ms longer (docs/performance.md, "Cost to the training job").
INDEX_COPY_MAX = 131_072


@dataclass(frozen=True)
class IndexPaging:
    """How a partition's indexes are read: pages of `span` indexes of the space, or one copy for a
    partition of at most `copy_max`; `reader` is the function run on the controller (page_reader())."""

    span: int = INDEX_PAGE_SPAN
    copy_max: int = INDEX_COPY_MAX
    reader: PageReader | None = None

    def __post_init__(self) -> None:
        if self.span < 1 or self.copy_max < 0:
            raise ValueError(f"need span >= 1 and copy_max >= 0, got {self.span}, {self.copy_max}")


DEFAULT_INDEX_PAGING = IndexPaging()


class IndexRanges:
    """A partition's global indexes, ascending: in pages, or in one copy for a partition of at most
    copy_max indexes and wherever the pages do not fit the controller; and kept for `reuse_seconds` on request
    (FixedPacing.index_range_reuse_seconds). With `quiet`, each page or copy in a quiet moment of the
    controller (a page waits inside its own call)."""

    def __init__(
        self,
        controller: Any,
        requests: TqRequests,
        paging: IndexPaging = DEFAULT_INDEX_PAGING,
        quiet: QuietMoments | None = None,
    ) -> None:
        self._controller = controller
        self._requests = requests
        self._paging = paging
        self._read_page = ControllerFunction(
            requests,
            controller,
            OP_INDEX_PAGE,
            INDEX_PAGES,
            paging.reader or page_reader(),
            "Using get_partition_index_range from now on, which holds the controller for the whole index "
            "set at once",
            logger,
            quiet,
        )
        self._quiet = quiet
        self.pages = self._read_page
        self._kept: dict[str, tuple[float, array[int]]] = {}  # partition -> (monotonic, indexes)

    def indexes(
        self, partition: str, pause: Callable[[float], None], reuse_seconds: float = 0.0
    ) -> array[int]:
        """Every global index of the partition (its pre-allocated ones too); an unknown partition has
        none. `pause(seconds)` is called after each page with the page's latency (the duty cycle's pause;
        it may raise Interrupted). With `reuse_seconds`, the indexes this read for the partition less than
        `reuse_seconds` ago, if it did."""
        kept = self._kept.get(partition)
        if reuse_seconds > 0 and kept is not None and time.monotonic() - kept[0] < reuse_seconds:
            return kept[1]
        indexes = self._read(partition, pause)
        self._kept[partition] = (time.monotonic(), indexes)
        return indexes

    def _read(self, partition: str, pause: Callable[[float], None]) -> array[int]:
        """In pages if the partition has more than copy_max indexes (a first answer that looks up
        nothing gives its size, and the end of the space), else in one copy."""
        with suppress(DoesNotFit):  # the copy from then on (warned once)
            end, size, _ = self._page(partition, 0, 0, pause)
            if size > self._paging.copy_max:
                return self._pages(partition, end, pause)
        return self._whole(partition)

    def _pages(self, partition: str, end: int, pause: Callable[[float], None]) -> array[int]:
        indexes: array[int] = array("q")  # 8 bytes an index, not a list's 36
        span = self._paging.span
        for start in range(0, end, span):
            indexes.extend(self._page(partition, start, start + span, pause)[2])
        return indexes

    def _page(
        self, partition: str, start: int, stop: int, pause: Callable[[float], None]
    ) -> tuple[int, int, list[int]]:
        what = f"global index page [{start}, {stop}) of {partition!r}"
        answer: tuple[int, int, list[int]]
        answer, seconds = self._read_page(what, partition, start, stop)
        pause(seconds)
        return answer

    def _whole(self, partition: str) -> array[int]:
        if self._quiet is not None:
            self._quiet.wait()
        what = f"{OP_INDEX_RANGE}({partition!r})"
        listed: list[int] = self._requests.actor_call(
            OP_INDEX_RANGE, what, self._controller, OP_INDEX_RANGE, partition
        )
        listed.sort()
        return array("q", listed)
