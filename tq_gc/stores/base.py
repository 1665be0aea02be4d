"""The row store: where TransferQueue rows live. Shaped after TQ's own calls.

| method       | TQ call                                   |
|--------------|-------------------------------------------|
| partitions   | client.get_partition_list()               |
| list_rows    | tq.kv_list(partition_id)                  |
| identities   | client.kv_retrieve_meta(keys, pid, create=False) |
| delete       | tq.kv_clear(keys, partition_id)           |

Every method raises StoreUnavailable when the store cannot answer; the sweep then stops and deletes
nothing more. Implementations batch calls to the store themselves where the store needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tq_gc.model import Identity, Tags


class RowStore(Protocol):
    def partitions(self) -> list[str]:
        """Every partition id the store knows, in any order."""
        ...

    def list_rows(self, partition: str) -> dict[str, Tags]:
        """Every keyed row of a partition: {key: tags}. An unknown partition is empty, not an error."""
        ...

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        """The current identity (global index + tags digest) of each key that still exists.

        Keys that do not exist are absent from the result: they are never created.
        """
        ...

    def delete(self, partition: str, keys: Sequence[str]) -> None:
        """Delete the given keys. Unknown keys are skipped (TQ clears are idempotent)."""
        ...
