"""Row stores: where rows live. `transferqueue` is the real one; `memory` serves tests."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import TYPE_CHECKING

from tq_gc.stores.base import RowStore
from tq_gc.stores.memory import MemoryRowStore

if TYPE_CHECKING:
    from tq_gc.config import Config
    from tq_gc.stores.transferqueue.journalled_keys import JournalSettings
    from tq_gc.stores.transferqueue.pacing import FixedPacing
    from tq_gc.wiring import StoreOptions

log = logging.getLogger(__name__)


def attach_transfer_queue(
    config: Config,
    options: StoreOptions,
    fixed: FixedPacing | None = None,
    journal: JournalSettings | None = None,
) -> RowStore:
    """Attach to the running job's TransferQueue, pressing on its controller at most the options' duty
    cycle of the time, listing swept partitions by the change journal if they say so (imported lazily:
    Ray and torch are slow to import). `fixed` and `journal`: a test's or bench's own pacing and journal
    settings (`journal` turns the journal on whatever the options say)."""
    from tq_gc.stores.transferqueue import TransferQueueRowStore
    from tq_gc.stores.transferqueue.journalled_keys import JournalSettings
    from tq_gc.stores.transferqueue.pacing import FIXED_PACING

    if journal is None and options.change_journal:
        journal = JournalSettings()
    return TransferQueueRowStore.attach(
        config.transfer_queue,
        duty_cycle=options.duty_cycle,
        fixed=fixed or FIXED_PACING,
        change_journal=journal,
    )


_IMPORT_THREAD_NAME = "tq-gc-import"


def import_transfer_queue_soon() -> None:
    """Import TransferQueue (torch with it) now, in a thread of its own: 3-6 s of CPU that a sidecar
    then spends at its start, beside the job's own start-up, not at its first sweep beside the job's
    training steps. The attach imports it anyway (waiting for this import if it is still running), and
    raises what it raises."""
    threading.Thread(target=_import_transfer_queue, name=_IMPORT_THREAD_NAME, daemon=True).start()


def transfer_queue_imported() -> bool:
    """This process has TransferQueue imported, and no import of it by import_transfer_queue_soon is
    still running."""
    return "transfer_queue" in sys.modules and not transfer_queue_importing()


def transfer_queue_importing() -> bool:
    """import_transfer_queue_soon's import is still running in this process (the sidecar warming up)."""
    return any(thread.name == _IMPORT_THREAD_NAME for thread in threading.enumerate())


def _import_transfer_queue() -> None:
    try:
        importlib.import_module("transfer_queue")
    except Exception as exc:  # the attach meets it again, and reports it
        log.debug("importing transfer_queue ahead of the first sweep failed: %s", exc)


__all__ = [
    "MemoryRowStore",
    "RowStore",
    "attach_transfer_queue",
    "import_transfer_queue_soon",
    "transfer_queue_imported",
    "transfer_queue_importing",
]
