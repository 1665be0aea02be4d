"""Reading a batch of rows as one answer of the controller, and clearing exactly those still as expected.

TQ has no compare-and-delete: `tq.kv_clear` is `kv_retrieve_meta(create=False)` then
`clear_samples(meta)`, not atomic. A batch's re-check and clear here are the same two requests, back to
back on the client's loop, the clear narrowed to the rows the re-check matched: the narrowest window TQ
allows. In that window a row cleared by someone else can have its global index reissued; the
controller's clear is scoped to the partition, but SimpleStorage's is by global index only (a TQ
limitation, the same for kv_clear).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tq_gc.rows import Identity
from tq_gc.stores.transferqueue.requests import OP_CLEAR, OP_KEYS, OP_META, TqRequests
from tq_gc.stores.transferqueue.rows import unchanged

logger = logging.getLogger(__name__)

# snapshot(): rounds to pin down which key each index belongs to when some keys are gone (see there).
IDENTITY_ROUNDS = 3


def clear_batch_if_unchanged(
    requests: TqRequests, partition: str, batch: list[str], expected: Mapping[str, Identity], done: int
) -> list[str]:
    """Clear the rows of `batch` whose identity is still `expected[key]`; return their keys. `done`: the
    rows this call's caller cleared before (for the error message)."""
    what = f"re-check and clear of {len(batch)} rows in {partition!r}"
    cleared = requests.call(None, what, _clear_if_unchanged(requests, partition, batch, expected))
    if cleared is not None:  # the usual case: one round trip to the client's loop
        return cleared
    keys, meta = snapshot(requests, partition, batch)
    # A row recreated (another index) or retagged since the plan saw it is not the row the
    # plan judged: it stays, and the collector counts it as recheck_saved.
    matched = unchanged(keys, meta, expected)
    if not matched:
        return []
    what = f"clear of {len(matched)} rows in {partition!r} (after {done} deleted in this call)"
    # select_samples deep-copies every row's tags: skip it when every row matched (the usual case).
    doomed = meta if len(matched) == len(keys) else meta.select_samples(matched)
    requests.call(OP_CLEAR, what, requests.client.async_clear_samples(doomed))
    return [keys[i] for i in matched]


async def _clear_if_unchanged(
    requests: TqRequests, partition: str, keys: list[str], expected: Mapping[str, Identity]
) -> list[str] | None:
    """Snapshot, match and clear in one coroutine, back to back on the client's loop. None when
    some keys are gone (the snapshot is then not aligned with `keys`): the caller takes the long way."""
    meta = await requests.timed(OP_META, retrieve_meta(requests, partition, keys))
    if meta.size != len(keys):
        return None
    matched = unchanged(keys, meta, expected)
    if matched:
        # select_samples deep-copies every row's tags: skip it when every row matched (the usual case).
        doomed = meta if len(matched) == len(keys) else meta.select_samples(matched)
        await requests.timed(OP_CLEAR, requests.client.async_clear_samples(doomed))
    return [keys[i] for i in matched]


def clear_keys(requests: TqRequests, partition: str, keys: list[str], done: int, total: int) -> None:
    """Clear `keys` whatever their rows are, like tq.kv_clear (tests and tools; the collector never)."""
    what = f"kv_clear of {len(keys)} keys in {partition!r} (after {done} of {total})"
    meta = requests.call(OP_META, what, retrieve_meta(requests, partition, keys))
    if meta.size > 0:
        requests.call(OP_CLEAR, what, requests.client.async_clear_samples(meta))


def snapshot(requests: TqRequests, partition: str, keys: list[str]) -> tuple[list[str], Any]:
    """(keys, meta): the keys of `keys` that exist, and their BatchMeta, row i being keys[i], as one
    answer of the controller. Keys gone, or changed while we ask, are left out."""
    # The BatchMeta of kv_retrieve_meta carries no keys and drops unknown ones, so an answer shorter
    # than the request does not say which index is whose. Then we ask the key of each index
    # (kv_retrieve_keys) and ask again for exactly the keys still there: an answer as long as its
    # request is aligned with it, in one snapshot. A key deleted, recreated or created between two
    # rounds falls out of the request, and is reported absent: the caller keeps that row.
    wanted = keys
    for _ in range(IDENTITY_ROUNDS):
        meta = requests.call(
            OP_META,
            f"kv_retrieve_meta of {len(wanted)} keys in {partition!r}",
            retrieve_meta(requests, partition, wanted),
        )
        if meta.size == len(wanted):
            return wanted, meta
        if meta.size == 0:
            return [], meta
        owners = requests.call(
            OP_KEYS,
            f"kv_retrieve_keys of {meta.size} indexes in {partition!r}",
            requests.client.async_kv_retrieve_keys(
                global_indexes=list(meta.global_indexes), partition_id=partition
            ),
        )
        still_there = {key for key in owners if key is not None}
        wanted = [key for key in wanted if key in still_there]
        if not wanted:
            return [], None
    logger.warning(
        "partition %r kept changing while its identities were read; %d keys reported absent",
        partition,
        len(wanted),
    )
    return [], None


def retrieve_meta(requests: TqRequests, partition: str, keys: list[str]) -> Any:
    """The request for the BatchMeta of `keys` (a coroutine). create=False always: with create=True TQ
    registers the keys it does not know."""
    return requests.client.async_kv_retrieve_meta(keys=keys, partition_id=partition, create=False)
