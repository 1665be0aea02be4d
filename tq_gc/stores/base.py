"""The row store: where TransferQueue rows live. Shaped after TQ's own calls.

| method       | TQ call                                   |
|--------------|-------------------------------------------|
| partitions   | client.get_partition_list()               |
| list_rows    | tq.kv_list(partition_id)                  |
| identities   | client.kv_retrieve_meta(keys, pid, create=False) |
| delete_if_unchanged | kv_retrieve_meta, then clear_samples of exactly the rows it matched |

Every method raises StoreUnavailable when the store cannot answer; the sweep then stops and deletes
nothing more. Implementations batch calls to the store themselves where the store needs it.

Optional methods, used when a store has them (the stores here do):

- `list_keys(partition) -> {key: global index}`: every row present for the whole listing, without tags
  (TQ: kv_retrieve_keys over the partition's global indexes). The collector lists a partition that is
  only swept this way; without it, with list_rows.
- `ensure_attached()`, `take_request_stats()`, `interrupt()`, `wait_for_quiet()`: see
  TransferQueueRowStore. The collector calls `wait_for_quiet()` before each delete batch's re-check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tq_gc.rows import Identity, Tags


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

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        """Delete each key whose identity is still `expected[key]`; return the keys deleted.

        A key gone, recreated (new global index) or retagged since is left alone and not returned.
        TQ has no compare-and-delete: the store reads the identities and clears, back to back, exactly
        the rows it just matched (by global index), which leaves the narrowest window it can.
        """
        ...


def optional_method(store: object, name: str) -> Callable[..., Any] | None:
    """One of the optional methods above, if `store` has it."""
    method = getattr(store, name, None)
    return method if callable(method) else None


def keys_with_indexes(store: RowStore, partition: str) -> dict[str, int]:
    """{key: global index} of a partition, for a store that cannot list keys alone: its listing, then
    the listed rows' identities (a row gone in between is left out)."""
    found = store.identities(partition, list(store.list_rows(partition)))
    return {key: index for key, (_, index) in found.items() if index is not None}
