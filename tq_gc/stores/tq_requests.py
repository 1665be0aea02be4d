"""tq-gc's own TransferQueue requests, by operation: what each one held up the job's controller for
(it serves one request at a time). The row store records them; the collector takes them once a sweep."""

from __future__ import annotations

import threading

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
