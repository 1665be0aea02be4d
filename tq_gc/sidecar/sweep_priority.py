"""The sidecar's scheduled sweeps yield the node's CPU to the training job.

On a node whose cores the job keeps busy, a sweep's own CPU (its plan, the listing's bookkeeping: seconds
at 1M rows) competes with the job's processes, and the job's requests wait for a core. Ray already runs
its workers, the job's and the sidecar's alike, at niceness 15. The thread that runs the scheduled sweeps
goes to the lowest priority, 19: where a core is contended the job's threads get about 2.4 times its
share (CFS weights 36 against 15), and where one is free the sweep runs as fast as before.

Only that thread: Linux's niceness is per thread, and the actor's other threads serve the trainer kit's
admissions and `status()`, which must not wait behind the job. Threads the sweep starts (its lease
renewal) inherit it. Elsewhere than Linux, where the call would lower the whole process, nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

LOWEST_PRIORITY = 19


def lower_this_threads_priority() -> None:
    """Put the calling thread at the lowest CPU priority (Linux; a no-op elsewhere, or where refused)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):  # a sandbox that forbids it: the sweep keeps the priority it has
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
