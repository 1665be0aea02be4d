"""Where the sidecar lives in Ray: one name in one namespace, not settings.

TransferQueue runs one controller per Ray cluster (the named actor TransferQueueController in the
namespace transfer_queue), and a TransferQueue's claim lets the sweepers of one state store sweep it
(tq_gc/stores/claims.py): one sidecar per Ray cluster is all there can usefully be. A second start finds
the running one by this name (tq_gc/sidecar/client.py). Tests that run many sidecars in one cluster give
each a name of its own (start_sidecar's `name`).
"""

from __future__ import annotations

SIDECAR_NAME = "tq-gc"
SIDECAR_RAY_NAMESPACE = "tq_gc"

__all__ = ["SIDECAR_NAME", "SIDECAR_RAY_NAMESPACE"]
