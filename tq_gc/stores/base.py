"""The row store: where TransferQueue rows live. Shaped after TQ's own calls.

| method       | TQ call                                   |
|--------------|-------------------------------------------|
| partitions   | client.get_partition_list()               |
| list_rows    | tq.kv_list(partition_id), or in paced windows |
| identities   | client.kv_retrieve_meta(keys, pid, create=False) |
| delete_if_unchanged | kv_retrieve_meta, then clear_samples of exactly the rows it matched |

Every method raises StoreUnavailable when the store cannot answer; the sweep then stops and deletes
nothing more. Implementations batch calls to the store themselves where the store needs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tq_gc.model import Identity, Tags


class RowStore(Protocol):
    def partitions(self) -> list[str]:
        """Every partition id the store knows, in any order."""
        ...

    def list_rows(self, partition: str, *, see_moves: bool = True) -> dict[str, Tags]:
        """Every keyed row of a partition: {key: tags}. An unknown partition is empty, not an error.

        Rows present for the whole listing are listed; rows written or deleted during it may be in or
        out. With `see_moves`, also one of the two rows of a reference moved make-before-break from one
        row to another during the listing (what the partition of a tags or owners source needs; a
        partition that is only swept does not: a row missed there is kept, not deleted)."""
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
