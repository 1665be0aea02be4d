"""The TransferQueue backend: a running training job's TQ as a row store.

Its face is `TransferQueueRowStore` (store.py, imported on first use: it brings Ray with it) and
STORE_SERIES, what it adds to the metrics. Every TQ internal the backend reads is in internals.py, with
the TQ versions it was read from: the file to check when TQ moves.

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
  `get_partition_index_range` where the pages do not fit. The store's `list_rows()` builds on these.
- `tq.kv_clear` is `kv_retrieve_meta(create=False)` then `clear_samples(meta)`: not atomic, TQ has no
  compare-and-delete. The store's `delete_if_unchanged()` re-checks and clears back to back (clearing.py).
- A job may replace its controller (it died; the job ran `transfer_queue.init` again): the new one
  issues global indexes afresh. `ensure_attached()` tells (the controller by TQ's name is not the
  instance attached to), and `identity_space()` names the instance whose indexes this store reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tq_gc.metrics import StoreSeries
from tq_gc.stores.transferqueue.controller_function import MISFITS_FOUND
from tq_gc.stores.transferqueue.internals import CONTROLLER_FUNCTIONS
from tq_gc.stores.transferqueue.requests import PACING_WAITS, TQ_REQUEST_OPS

STORE_SERIES = StoreSeries(TQ_REQUEST_OPS, CONTROLLER_FUNCTIONS, MISFITS_FOUND.counts, PACING_WAITS)

if TYPE_CHECKING:
    from tq_gc.stores.transferqueue.store import TransferQueueRowStore


def __getattr__(name: str) -> Any:
    if name == "TransferQueueRowStore":
        from tq_gc.stores.transferqueue.store import TransferQueueRowStore

        return TransferQueueRowStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONTROLLER_FUNCTIONS", "MISFITS_FOUND", "STORE_SERIES", "TQ_REQUEST_OPS", "TransferQueueRowStore"]
