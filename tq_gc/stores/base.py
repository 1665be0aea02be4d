"""The row store: where TransferQueue rows live. Shaped after TQ's own calls.

| method       | TQ call                                   |
|--------------|-------------------------------------------|
| partitions   | client.get_partition_list()               |
| list_rows    | tq.kv_list(partition_id)                  |
| list_keys    | kv_retrieve_keys over the partition's global indexes |
| identities   | client.kv_retrieve_meta(keys, pid, create=False) |
| delete_if_unchanged | kv_retrieve_meta, then clear_samples of exactly the rows it matched |

`RowStore` is the base class of every row store: four methods each store has its own answer to, and the
rest with defaults that fit a store living in this process (`MemoryRowStore`, a test's wrapper
subclass). Every method that reads or deletes raises StoreUnavailable when the store cannot answer; the
sweep then stops and deletes nothing more. Implementations batch calls to the store themselves where the
store needs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tq_gc.footprint import Leftovers, StorageFill
from tq_gc.listings import HowListed
from tq_gc.rows import Identity, Tags

if TYPE_CHECKING:
    from tq_gc.stores.claims import StoreClaim

# The most rows of a delete batch of a store that does not size its own (RowStore.delete_batches): as
# many as the TransferQueue store's requests carry by default.
DELETE_BATCH_ROWS = 2000


class RowStore(ABC):
    @abstractmethod
    def partitions(self) -> list[str]:
        """Every partition id the store knows, in any order."""

    @abstractmethod
    def list_rows(self, partition: str) -> dict[str, Tags]:
        """Every keyed row of a partition: {key: tags}. An unknown partition is empty, not an error."""

    @abstractmethod
    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        """The current identity (global index + tags digest) of each key that still exists.

        Keys that do not exist are absent from the result: they are never created.
        """

    @abstractmethod
    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        """Delete each key whose identity is still `expected[key]`; return the keys deleted.

        A key gone, recreated (new global index) or retagged since is left alone and not returned.
        TQ has no compare-and-delete: the store reads the identities and clears, back to back, exactly
        the rows it just matched (by global index), which leaves the narrowest window it can.
        """

    def list_keys(self, partition: str) -> dict[str, int]:
        """{key: global index} of every row present for the whole listing, without tags: how the sweep
        lists a partition that is only swept (a tags source's partition is listed with list_rows).
        Default: list_rows, then the listed rows' identities (keys_with_indexes)."""
        return keys_with_indexes(self, partition)

    def row_sizes(self, partition: str) -> Mapping[str, int]:
        """{key: bytes} of the rows of `partition` whose size its last listing read (the store reads sizes
        inside its listing, never in a pass of their own). Default: none known."""
        return {}

    def size_partitions(self, partitions: Collection[str]) -> None:
        """Read row sizes in the listings of `partitions` only (the sweep's scope): a tags source's
        partition outside it is listed without. Default: nothing to set."""
        return None

    def storage_fill(self) -> StorageFill | None:
        """How full the store's storage is now (each unit's capacity and rows held), read-only and bounded
        in time; None if the store has no bounded storage (the default)."""
        return None

    def storage_leftovers(self) -> Leftovers | None:
        """Storage cells no row owns (a dropped storage clear's), read-only; None if the store cannot
        have any (the default)."""
        return None

    def delete_batches(self, partition: str, keys: Sequence[str]) -> Iterator[list[str]]:
        """The batches in which a sweep deletes `keys` of `partition` (the plan's order kept): the store
        alone sizes each batch and paces them, and yields each batch when it is ready for it. The sweep
        re-checks admissions and fences, then clears the batch in one delete_if_unchanged call, before
        it asks for the next: so whatever the store waits for before yielding (a throttle, a quiet
        moment) comes before the re-check, never between the re-check and the clear.
        Default: batches of DELETE_BATCH_ROWS, at once."""
        return batches_of(keys, DELETE_BATCH_ROWS)

    def ensure_attached(self) -> None:
        """Attach to the rows' store now if not attached (the sweep times this apart from its listing),
        and attach afresh if the store it was attached to is gone or replaced. Default: nothing to do."""
        return None

    def identity_space(self) -> str | None:
        """What issued the identities this store reports, now (a TQ controller instance): a new value
        means a new store whose global indexes start afresh, so no identity read from the old one names
        a row of the new one. None: the store cannot tell, or never changes (the default)."""
        return None

    def interrupt(self) -> None:
        """Make a read in progress, and every later one, raise Interrupted before its next request to
        the store; a delete call runs to its end. Default: nothing to interrupt (reads are short)."""
        return None

    def take_request_stats(self) -> dict[str, list[float]]:
        """{operation: [seconds of each request]} since the last call, and start afresh: what the
        store's requests held up. Default: none kept."""
        return {}

    def take_pacing_stats(self) -> dict[str, float]:
        """{what it waited for: seconds} between its requests since the last call, and start afresh: the
        store's own pacing (the job's quiet moments, a duty cycle). Default: none."""
        return {}

    def take_listings(self) -> dict[str, HowListed]:
        """{partition: how it was listed} since the last call (by a change journal, or in full and why),
        and start afresh: the store's own choice of listing. Default: none said."""
        return {}

    def claim(self, holder: str, where: str) -> StoreClaim | None:
        """A new hold on the store's claim for the sweeper `holder` (`where`: its state store, for people),
        taken by its sweeps (stores/claims.py): a store that sweepers of other processes, of other
        state stores, may reach must hand one out, and end those it handed out when it closes. Default:
        None, a store living in this process has no other sweeper."""
        return None

    def describe(self) -> dict[str, str]:
        """For `tq-gc check`: what the store says of itself once attached, {title: detail} (how a TQ's
        controller fits the functions tq-gc runs inside it). Default: nothing."""
        return {}

    def close(self) -> None:
        """Close what the store opened (never the job's TQ itself). Idempotent. Default: nothing."""
        return None


def keys_with_indexes(store: RowStore, partition: str) -> dict[str, int]:
    """{key: global index} of a partition, for a store that cannot list keys alone: its listing, then
    the listed rows' identities (a row gone in between is left out)."""
    found = store.identities(partition, list(store.list_rows(partition)))
    return {key: index for key, (_, index) in found.items() if index is not None}


def as_row_store(store: object) -> RowStore:
    """`store` as a RowStore: itself if it is one, else a RowStore over its four methods (a user's store
    written to the protocol alone, without the base class), with the defaults for the rest."""
    return store if isinstance(store, RowStore) else _ProtocolStore(store)


class _ProtocolStore(RowStore):
    def __init__(self, store: object) -> None:
        self._store: Any = store  # duck-typed: the four methods above, nothing else assumed

    def partitions(self) -> list[str]:
        return list(self._store.partitions())

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return dict(self._store.list_rows(partition))

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        return dict(self._store.identities(partition, keys))

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        return set(self._store.delete_if_unchanged(partition, expected))


def batches_of(keys: Sequence[str], size: int) -> Iterator[list[str]]:
    """`keys` in order, in batches of `size` (the last one smaller)."""
    for start in range(0, len(keys), size):
        yield list(keys[start : start + size])
