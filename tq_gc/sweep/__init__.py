"""One sweep in named parts. `Collector` (collector.py) runs the sequence; each step is one part's:

    lease.py       the lease: taken first, renewed (re-check, background), checked fresh before a clear
    observe.py     what the sweep sees now: the listing and every reference, in move-safe order
    record.py      what it remembers between sweeps: trusted records, new ones pinned, the barrier
    delete.py      re-check -> intent -> clear -> confirm, in the batches the row store sizes and paces
    run.py         one sweep's state, from the lease to the report
    clocks.py, cyclic_gc.py   the clocks a sweep reads; the interpreter's GC paused while it runs

How each error ends a sweep is the error's own (tq_gc/errors.py).
"""

from __future__ import annotations

from tq_gc.sweep.collector import Collector
from tq_gc.sweep.run import Progress

__all__ = ["Collector", "Progress"]
