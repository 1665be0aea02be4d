"""A sidecar's scheduled sweeps run at the lowest CPU priority, on their own thread only (Linux's niceness
is per thread): the job's processes win a contended core, and the actor's other threads (admissions
served to publishers, status) keep theirs."""

from __future__ import annotations

import os
import threading

from tq_gc.sidecar.sweep_priority import LOWEST_PRIORITY, lower_this_threads_priority


def niceness_of(native_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, native_id)


def test_only_the_calling_thread_goes_to_the_lowest_priority() -> None:
    before = niceness_of(threading.get_native_id())
    seen: dict[str, int] = {}

    def sweeper() -> None:
        lower_this_threads_priority()
        lower_this_threads_priority()  # again: a thread already there stays
        seen["sweeper"] = niceness_of(threading.get_native_id())

    thread = threading.Thread(target=sweeper)
    thread.start()
    thread.join(timeout=30)
    assert seen == {"sweeper": LOWEST_PRIORITY}
    assert niceness_of(threading.get_native_id()) == before
