"""The tq-gc CLI with what tests tune and users cannot: the TransferQueue store's fixed pacing (its batch)
and the sweep lease's TTL, neither of them a setting. A test that needs small delete batches or a lease
that lapses in seconds runs its CLI subprocess as

    python -m tools.testbed.tuned_cli [--batch N] [--lease-ttl-seconds S] -- sweep --config F --execute

which is `tq-gc sweep --config F --execute` (the same entry point, tq_gc.cli.main) over that tuning."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from tq_gc.cli import main as tq_gc_main
from tq_gc.config import Config
from tq_gc.stores import RowStore
from tq_gc.sweep.lease import LEASE_TTL_SECONDS
from tq_gc.wiring import RowStoreFactory, Runtime

MODULE = "tools.testbed.tuned_cli"


def tuned_cli_command(batch: int | None = None, lease_ttl_seconds: float | None = None) -> list[str]:
    """The argv that starts the CLI with this tuning; the CLI's own arguments follow it."""
    tuning = [] if batch is None else ["--batch", str(batch)]
    tuning += [] if lease_ttl_seconds is None else ["--lease-ttl-seconds", str(lease_ttl_seconds)]
    return [sys.executable, "-m", MODULE, *tuning, "--"]


def paced_row_store(batch: int, config: Config, duty_cycle: float) -> RowStore:
    """The job's TransferQueue, attached at `duty_cycle` with requests and delete batches of `batch` rows at
    most. A module-level function: a sidecar's Ray worker imports it by name (functools.partial of it)."""
    from tq_gc.stores.transferqueue import TransferQueueRowStore
    from tq_gc.stores.transferqueue.pacing import FIXED_PACING

    fixed = replace(FIXED_PACING, batch=batch)
    return TransferQueueRowStore.attach(config.transfer_queue, duty_cycle=duty_cycle, fixed=fixed)


def row_store_factory(batch: int | None) -> RowStoreFactory | None:
    """None (the CLI's own attach) without a batch of the test's own."""
    return None if batch is None else partial(paced_row_store, batch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--batch", type=int, help="the store's request and delete batch (default: 2000)")
    parser.add_argument(
        "--lease-ttl-seconds", type=float, default=LEASE_TTL_SECONDS, help="the sweep lease's TTL (60)"
    )
    parser.add_argument("cli_args", nargs=argparse.REMAINDER, help="-- then the tq-gc CLI's arguments")
    args = parser.parse_args(argv)
    cli_args = args.cli_args[1:] if args.cli_args[:1] == ["--"] else args.cli_args
    runtime = Runtime(
        row_store_factory=row_store_factory(args.batch), lease_ttl_seconds=args.lease_ttl_seconds
    )
    return tq_gc_main(cli_args, runtime)


if __name__ == "__main__":
    sys.exit(main())
