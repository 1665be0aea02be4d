"""Storage-side leftovers: cells a SimpleStorage unit holds at global indexes that no partition owns.

How they come about (read from the 0.1.9-0.1.11 wheels): a storage clear that fails is logged and dropped,
and the controller forgets the rows anyway (0.1.11's `clear_samples`), so the cells stay in the unit with
nothing pointing to them; no listing sees them, and they count against the unit's capacity. (A put that
fails half-way leaves the other units' shares under keys the controller did register: those rows are
listed, and swept like any row.)

The audit compares each unit's active keys with the controller's per-partition index sets (never
`allocated_indexes`, which under-counts after index reuse), read in the order controller, units,
controller: a cell is a leftover only if no partition owned its index at either controller read, so a
row put before the audit and cleared after it is never one. A row put and cleared entirely within the
audit could pass for one; the audit is repeated (`rounds`) and only cells found in every round count.

Reclaim: not done. TQ has no call that clears a storage cell the controller does not own, and a clear
by index races a put that reuses it (freed indexes are reissued first in, first out): the put's new
cell would go. A leftover goes when its index is reused (the put overwrites the cell) or the job's
storage restarts. The audit reports them, and says so.

Read-only: each unit is asked for its key set (a copy, on the unit's actor thread: its worker thread
waits for the copy, a few ms at 100k keys) and the byte sizes of the leftover cells; the controller for
its partitions' index sets (a copy beside its request thread). O(rows): run it on demand, not every sweep.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from tq_gc.footprint import Leftovers

UNIT_NAME_PREFIX = "TransferQueueStorageUnit#"
NOT_RECLAIMED = (
    "not reclaimed: TransferQueue has no call that clears a storage cell its controller does not own, "
    "and a clear by index would race a put reusing it; each goes when its index is reused"
)


def owned_indexes(controller: Any) -> set[int]:
    """Every global index some partition owns now (the controller's `index_manager.partition_to_indexes`)."""
    import ray

    def read(actor: Any) -> list[int]:
        owned: set[int] = set()
        for indexes in list(actor.index_manager.partition_to_indexes.values()):
            owned.update(indexes)
        return sorted(owned)

    return set(ray.get(controller.__ray_call__.remote(read), timeout=60))


def storage_units() -> dict[str, Any]:
    """{name: actor handle} of the cluster's SimpleStorage units (named `TransferQueueStorageUnit#<rank>`
    in the namespace of the process that created the TQ)."""
    import ray

    found = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name, namespace = actor["name"], actor["namespace"]
        if name.startswith(UNIT_NAME_PREFIX):
            found[name] = ray.get_actor(name, namespace=namespace)
    return found


def unit_keys(unit: Any) -> set[int]:
    import ray

    def read(actor: Any) -> list[int]:
        return [int(key) for key in list(actor.storage_data._active_keys)]

    return set(ray.get(unit.__ray_call__.remote(read), timeout=60))


def cell_bytes(unit: Any, indexes: Iterable[int]) -> int:
    """The bytes of the unit's values at `indexes` (tensors' nbytes; other values count nothing)."""
    import ray

    wanted = list(indexes)

    def read(actor: Any, wanted: list[int]) -> int:
        total = 0
        for values in list(actor.storage_data.field_data.values()):
            for index in wanted:
                value = values.get(index)
                total += int(getattr(value, "nbytes", 0) or 0)
        return total

    return int(ray.get(unit.__ray_call__.remote(read, wanted), timeout=60)) if wanted else 0


def audit_leftovers(controller: Any, rounds: int = 2, pause_seconds: float = 0.5) -> Leftovers:
    """The cells unowned in each of `rounds` audits (controller, units, controller), with their bytes."""
    units = storage_units()
    suspects: dict[str, set[int]] | None = None
    for round_ in range(rounds):
        if round_:
            time.sleep(pause_seconds)
        before = owned_indexes(controller)
        held = {name: unit_keys(unit) for name, unit in units.items()}
        owned = before | owned_indexes(controller)
        found = {name: keys - owned for name, keys in held.items()}
        suspects = (
            found if suspects is None else {n: suspects.get(n, set()) & keys for n, keys in found.items()}
        )
    leftover = {name: keys for name, keys in (suspects or {}).items() if keys}
    cells = sum(len(keys) for keys in leftover.values())
    return Leftovers(
        cells=cells,
        bytes=sum(cell_bytes(units[name], keys) for name, keys in leftover.items()),
        by_unit={name: len(keys) for name, keys in leftover.items()},
        indexes=tuple(sorted(index for keys in leftover.values() for index in keys)),
        why_not_reclaimed=NOT_RECLAIMED if cells else None,
    )
