"""The training job's TransferQueue (this process created it) and the partitions and route-plan tags
the job writes in it, through TQ's own API only."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

STAGING = "rollout_staging"
CANONICAL = "rollout_data"
ROUTE_PLAN_KEY_PATH = "route_assembly_plan.cleanup_staging_keys"


class JobTq:
    """The soak's TransferQueue (created by this process, which plays the training job). TQ's
    module-level client is shared by every thread here, so calls are serialized."""

    def __init__(self, tq: Any) -> None:
        self._tq = tq
        self._lock = threading.Lock()

    def put(self, partition: str, keys: Sequence[str], tags: Sequence[dict[str, Any]]) -> None:
        import torch
        from tensordict import TensorDict

        fields = TensorDict({"token_ids_delta": torch.zeros(len(keys), 8, dtype=torch.int32)}, len(keys))
        with self._lock:
            self._tq.kv_batch_put(keys=list(keys), partition_id=partition, fields=fields, tags=list(tags))

    def clear(self, partition: str, keys: Sequence[str]) -> None:
        with self._lock:
            self._tq.kv_clear(list(keys), partition)

    def keys(self, partition: str) -> set[str]:
        with self._lock:
            return set(self._tq.kv_list(partition).get(partition, {}))

    def exists(self, partition: str, key: str) -> bool:
        with self._lock:
            meta = self._tq.get_client().kv_retrieve_meta([key], partition, create=False)
        return len(meta.global_indexes) == 1


def route_plan_tags(staging_keys: Sequence[str]) -> dict[str, Any]:
    return {"route_assembly_plan": {"cleanup_staging_keys": list(staging_keys)}, "weight_version": 1}
