"""The keys of a swept partition's global indexes, read beside the job's requests rather than among them.

`kv_retrieve_keys` is a request like the job's own: the controller serves those one at a time on its
request thread, so each of a listing's windows (500 of 2,000 indexes at 1M rows, ~1 ms each there)
is a turn the job's requests wait behind. The same lookup (TQ's own {global index: key} map, which
`kv_retrieve_keys` reads) runs on the controller's actor thread through Ray (`__ray_call__`, as the
index pages do, index_range.py): the request thread goes on serving the job, sharing the GIL, which
the window holds for its lookup and while Ray decodes its indexes and encodes its keys. Windows of
4,096 indexes meet the job about as a `kv_retrieve_keys` listing does (longer ones hold the GIL too
long), and list the partition in less time, so for a shorter part of each sweep (the probe's figures:
docs/performance.md, "Cost to the training job").

Each key read is the key its index had at that moment, as with `kv_retrieve_keys`; a window is not one
snapshot (the job's requests may run between two lookups), which no caller relies on: a listing names a
(key, index) pair the controller held at some instant of it, and every delete re-checks it first.

Where the reader does not fit the controller (another TQ version: internals.py,
controller_function.py), the store warns once and asks `kv_retrieve_keys` from then on.
"""

from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass
from typing import Any

from tq_gc.errors import StoreUnavailable
from tq_gc.stores.transferqueue.controller_function import ControllerFunction, DoesNotFit
from tq_gc.stores.transferqueue.internals import KEY_WINDOWS, KeysReader, keys_reader
from tq_gc.stores.transferqueue.quiet import QuietMoments
from tq_gc.stores.transferqueue.requests import OP_KEYS_WINDOW, TqRequests

logger = logging.getLogger(__name__)

# Indexes a window asks the keys of. Measured at 1M rows, the whole partition unpaced: windows of 2,048
# 1.1 s (Ray's round trip is most of each), 8,192 0.48-0.55 s (0.6 ms a window in the controller),
# kv_retrieve_keys of 2,000 0.89-0.93 s. Beside the job, 8,192 is too long a hold (above); 4,096 is not.
KEYS_WINDOW = 4_096


@dataclass(frozen=True)
class KeyWindows:
    """How a swept partition's keys are read: windows of `size` indexes, by `reader` (keys_reader())."""

    size: int = KEYS_WINDOW
    reader: KeysReader | None = None

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"need size >= 1, got {self.size}")


DEFAULT_KEY_WINDOWS = KeyWindows()


class ControllerKeys:
    """The keys of global indexes, read on the controller's actor thread (with `quiet`, each window in a
    quiet moment of the controller, waited for inside the window's call); `size` is None once the reader
    has not fit the controller (the caller then asks kv_retrieve_keys)."""

    def __init__(
        self,
        controller: Any,
        requests: TqRequests,
        windows: KeyWindows = DEFAULT_KEY_WINDOWS,
        quiet: QuietMoments | None = None,
    ) -> None:
        self._windows = windows
        self._read_keys = self.reader = ControllerFunction(
            requests,
            controller,
            OP_KEYS_WINDOW,
            KEY_WINDOWS,
            windows.reader or keys_reader(),
            "Using kv_retrieve_keys from now on",
            logger,
            quiet,
        )

    @property
    def size(self) -> int | None:
        return self._windows.size if self._read_keys.fits else None

    def read(
        self, partition: str, indexes: list[int]
    ) -> tuple[list[str | None], list[int] | None, float] | None:
        """(the key of each index, None where it has none; each index's row bytes, -1 where unknown, or
        None where the controller's field metadata did not fit; the read's seconds, without the wait
        before it), or None if the reader does not fit."""
        what = f"keys of {len(indexes)} global indexes in {partition!r}"
        try:
            (keys, sizes), seconds = self._read_keys(what, partition, array("q", indexes))
        except DoesNotFit:
            return None
        if len(keys) != len(indexes):
            raise StoreUnavailable(f"TransferQueue {what}: {len(keys)} answers for {len(indexes)} indexes")
        if sizes is not None and len(sizes) != len(indexes):
            sizes = None
        return keys, sizes, seconds
