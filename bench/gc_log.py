"""The garbage collector's pauses in a process of the bench (the job's loop, TQ's controller, the sidecar),
logged while a window runs, and which of the loop's slowest iterations they overlapped.

A collection holds its process's interpreter lock: in the controller it stalls the job's requests, in
the sidecar the sweep (and, with `memory://` state, the registry's callers), in the loop the job itself.
Installed and removed through Ray's `__ray_call__` (the function runs in the actor's process); the log is
kept on the actor instance so that two windows never share one.
"""

from __future__ import annotations

from typing import Any

from common import slowest_1pct

LOG_ATTRIBUTE = "_bench_gc_log"

# (unix seconds at the start, seconds it took, generation)
Pause = tuple[float, float, int]


def start_gc_log(actor: Any) -> None:
    """Run in the actor's process: log every collection from now on."""
    import gc
    import time

    pauses: list[Pause] = []
    began: list[float] = [0.0, 0.0]

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[:] = [time.time(), time.perf_counter()]
        else:
            pauses.append((began[0], time.perf_counter() - began[1], info["generation"]))

    on_collection.pauses = pauses  # type: ignore[attr-defined]
    stop_gc_log(actor)
    gc.callbacks.append(on_collection)
    setattr(actor, LOG_ATTRIBUTE, on_collection)


def stop_gc_log(actor: Any) -> list[Pause]:
    """Run in the actor's process: stop logging, and the pauses logged since start_gc_log."""
    import gc

    on_collection = getattr(actor, LOG_ATTRIBUTE, None)
    if on_collection is None:
        return []
    delattr(actor, LOG_ATTRIBUTE)
    if on_collection in gc.callbacks:
        gc.callbacks.remove(on_collection)
    pauses: list[Pause] = on_collection.pauses
    return pauses


def pauses_beside(loop: dict[str, Any], pauses: list[Pause]) -> dict[str, Any]:
    """One process's collections in the window: how many of each generation, the longest and the total,
    and how many of the loop's slowest 1% of iterations (and whether its slowest) overlapped one."""
    latencies, began = loop["latencies_s"], loop["began_unix"]
    slowest = slowest_1pct(latencies)

    def overlaps(i: int) -> bool:
        start, end = began[i], began[i] + latencies[i]
        return any(at < end and at + took > start for at, took, _ in pauses)

    by_generation = [sum(1 for *_, generation in pauses if generation == g) for g in range(3)]
    full = [took for _, took, generation in pauses if generation == 2]
    return {
        "collections": by_generation,
        "total_ms": round(1000 * sum(took for _, took, _ in pauses), 1),
        "longest_ms": round(1000 * max((took for _, took, _ in pauses), default=0.0), 1),
        "longest_full_ms": round(1000 * max(full, default=0.0), 1),
        "slowest_1pct_overlapping": sum(1 for i in slowest if overlaps(i)),
        "slowest_overlapping": bool(slowest) and overlaps(slowest[-1]),
    }
