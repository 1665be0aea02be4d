"""Where a sweeper comes from: one place opens the state store and the row store, and closes only what it
opened, and assembles the Collector over them (open_sweeper). The CLI, `tq-gc check` and the sidecar all
go through it; tests hand in their own stores. The only module besides the backend's own that names the
TransferQueue backend: the rest sees a RowStore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass

from tq_gc.config import Config
from tq_gc.metrics import StoreSeries
from tq_gc.sidecar.names import SIDECAR_NAME
from tq_gc.state import open_state
from tq_gc.state.base import StateStore
from tq_gc.stores import RowStore, attach_transfer_queue
from tq_gc.stores.base import as_row_store
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.transferqueue.pacing import DUTY_CYCLE as DEFAULT_DUTY_CYCLE
from tq_gc.stores.transferqueue.pacing import duty_cycle_problem
from tq_gc.sweep import Collector
from tq_gc.sweep.lease import LEASE_TTL_SECONDS


@dataclass(frozen=True)
class StoreOptions:
    """How this process uses the job's row store, chosen where it starts (never in the config):
    `duty_cycle`, the most of the wall time its requests may take; `change_journal`, a swept partition
    listed by the change journal in the job's TransferQueue controller (a sidecar's choice, off by
    default: docs/performance.md)."""

    duty_cycle: float = DEFAULT_DUTY_CYCLE
    change_journal: bool = False


# (config, options) -> the row store a sweep attaches to, used as the options say.
RowStoreFactory = Callable[[Config, StoreOptions], RowStore]


@dataclass
class Runtime:
    """The stores to run against: those handed in (tests), else built from config."""

    state: StateStore | None = None
    row_store: RowStore | None = None
    row_store_factory: RowStoreFactory | None = None
    # The sweep lease's TTL: the fixed one, unless a test (a CLI subprocess of one) wants a shorter one.
    lease_ttl_seconds: float = LEASE_TTL_SECONDS
    # How hard this process presses on the job's row store: chosen where it starts (`tq-gc --duty-cycle`,
    # start_sidecar's duty_cycle), not in the config.
    duty_cycle: float = DEFAULT_DUTY_CYCLE
    # Whether its row store lists swept partitions by the change journal: a sidecar's start option
    # (`tq-gc serve --change-journal`, start_sidecar's change_journal); a one-shot CLI sweep never does.
    change_journal: bool = False
    # The sidecar this process starts or reads: its fixed name, unless a test runs one of its own.
    sidecar_name: str = SIDECAR_NAME

    def attach(self, config: Config) -> RowStore:
        """The row store handed in, else the job's TransferQueue (or what the factory builds), used as
        this process's store options say."""
        if self.row_store is not None:
            return self.row_store
        return (self.row_store_factory or attach_transfer_queue)(config, self.store_options)

    @property
    def store_options(self) -> StoreOptions:
        return StoreOptions(self.duty_cycle, self.change_journal)

    @contextmanager
    def stores(
        self, config: Config, need_rows: bool = True, missing_queue_is_transient: bool = False
    ) -> Iterator[tuple[StateStore, RowStore | None]]:
        """The state store and (if `need_rows`) the row store, open for the block.

        A row store built here attaches at first use: a sweep skipped for a held lease or a fence never
        joins Ray. `missing_queue_is_transient` (the sidecar, which may start before the job's TQ) turns
        a missing TransferQueue into an aborted sweep instead of a config error."""
        with ExitStack() as opened:
            state = self.state
            if state is None:
                state = open_state(config.state_url, config.namespace)
                opened.callback(state.close)
            rows = None if self.row_store is None else as_row_store(self.row_store)
            if rows is None and need_rows:
                deferred = DeferredRowStore(lambda: self.attach(config), missing_queue_is_transient)
                opened.callback(deferred.close)  # only the client we attached, never the job's TQ
                rows = deferred
            yield state, rows

    @contextmanager
    def open_sweeper(
        self, config: Config, holder: str, missing_queue_is_transient: bool = False
    ) -> Iterator[Collector]:
        """The Collector of tq-gc's own process (the CLI's, the sidecar's) over this runtime's stores, open
        for the block; its claim on the row store ends at the block's end, then the stores close."""
        with self.stores(config, missing_queue_is_transient=missing_queue_is_transient) as (state, rows):
            assert rows is not None
            collector = Collector(
                config, state, rows, holder, pause_cyclic_gc=True, lease_ttl_seconds=self.lease_ttl_seconds
            )
            with closing(collector):
                yield collector


def store_series() -> StoreSeries:
    """What the row store's backend adds to the metrics (a TransferQueue's request operations and
    controller functions)."""
    from tq_gc.stores.transferqueue import STORE_SERIES

    return STORE_SERIES


__all__ = [
    "DEFAULT_DUTY_CYCLE",
    "RowStoreFactory",
    "Runtime",
    "StoreOptions",
    "duty_cycle_problem",
    "store_series",
]
