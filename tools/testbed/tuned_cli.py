"""The tq-gc CLI with what tests tune and users cannot: the TransferQueue store's fixed pacing (its batch),
the sweep lease's TTL and the change journal in its check mode, none of them a setting. A test that needs
small delete batches or a lease that lapses in seconds runs its CLI subprocess as

    python -m tools.testbed.tuned_cli [--batch N] [--lease-ttl-seconds S] [--journal-checks-to F] \
        [--job-idle-ms M] -- \
        sweep --config F --execute

which is `tq-gc sweep --config F --execute` (the same entry point, tq_gc.cli.main) over that tuning.
`--journal-checks-to F`: the store lists swept partitions by the change journal, each listing that
re-read only what changed compared with a full one taken right after (journal_check.py), every
comparison appended to F as a JSON line (the soak sums them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from tq_gc.cli import main as tq_gc_main
from tq_gc.config import Config
from tq_gc.stores import RowStore
from tq_gc.sweep.lease import LEASE_TTL_SECONDS
from tq_gc.wiring import RowStoreFactory, Runtime, StoreOptions

MODULE = "tools.testbed.tuned_cli"
# A job-idle time (FixedPacing.job_idle_ms) no test reaches: its store paces as beside a busy job, for tests
# that catch a sweep mid-listing or mid-delete (an idle job's requests go at once, with no pauses).
JOB_NEVER_IDLE_MS = 3_600_000.0


def tuned_cli_command(
    batch: int | None = None,
    lease_ttl_seconds: float | None = None,
    journal_checks_to: str | None = None,
    job_idle_ms: float | None = None,
) -> list[str]:
    """The argv that starts the CLI with this tuning; the CLI's own arguments follow it."""
    tuning = [] if batch is None else ["--batch", str(batch)]
    tuning += [] if job_idle_ms is None else ["--job-idle-ms", str(job_idle_ms)]
    tuning += [] if lease_ttl_seconds is None else ["--lease-ttl-seconds", str(lease_ttl_seconds)]
    tuning += [] if journal_checks_to is None else ["--journal-checks-to", journal_checks_to]
    return [sys.executable, "-m", MODULE, *tuning, "--"]


def paced_row_store(
    batch: int | None,
    journal_checks_to: str | None,
    job_idle_ms: float | None,
    config: Config,
    options: StoreOptions,
) -> RowStore:
    """The job's TransferQueue, attached as `options` say (the duty cycle, the change journal) with
    requests and delete batches of `batch` rows at most (None: the fixed batch), and with
    `journal_checks_to` the change journal in its check mode. A module-level function: a sidecar's Ray
    worker imports it by name (functools.partial of it)."""
    from tq_gc.stores import attach_transfer_queue
    from tq_gc.stores.transferqueue.journal_check import JournalCheck
    from tq_gc.stores.transferqueue.journalled_keys import JournalSettings
    from tq_gc.stores.transferqueue.pacing import FIXED_PACING

    fixed = FIXED_PACING if batch is None else replace(FIXED_PACING, batch=batch)
    fixed = fixed if job_idle_ms is None else replace(fixed, job_idle_ms=job_idle_ms)
    journal = None
    if journal_checks_to is not None:
        journal = JournalSettings(check=JournalCheck(partial(append_json_line, journal_checks_to)))
    return attach_transfer_queue(config, options, fixed=fixed, journal=journal)


def append_json_line(path: str, record: dict[str, Any]) -> None:
    """One check's record, with the process that made it, as a line of `path` (one write: a process
    SIGKILLed mid-write leaves at most its last line cut)."""
    line = json.dumps({**record, "pid": os.getpid()}) + "\n"
    with open(path, "a") as appended:
        appended.write(line)


def row_store_factory(
    batch: int | None, journal_checks_to: str | None = None, job_idle_ms: float | None = None
) -> RowStoreFactory | None:
    """None (the CLI's own attach) without a batch, a journal check or a job-idle time of the test's own.
    `job_idle_ms`: how long the job must make no request before the store's pacing steps aside
    (FixedPacing.job_idle_ms); a test that kills a sweeper mid-delete sets one never reached."""
    if batch is None and journal_checks_to is None and job_idle_ms is None:
        return None
    return partial(paced_row_store, batch, journal_checks_to, job_idle_ms)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--batch", type=int, help="the store's request and delete batch (default: 2000)")
    parser.add_argument(
        "--lease-ttl-seconds", type=float, default=LEASE_TTL_SECONDS, help="the sweep lease's TTL (60)"
    )
    parser.add_argument(
        "--journal-checks-to",
        help="the change journal on, each re-read listing checked against a full one, appended to this file",
    )
    parser.add_argument(
        "--job-idle-ms", type=float, help="how long the job must be idle for the pacing to step aside (250)"
    )
    parser.add_argument("cli_args", nargs=argparse.REMAINDER, help="-- then the tq-gc CLI's arguments")
    args = parser.parse_args(argv)
    cli_args = args.cli_args[1:] if args.cli_args[:1] == ["--"] else args.cli_args
    runtime = Runtime(
        row_store_factory=row_store_factory(args.batch, args.journal_checks_to, args.job_idle_ms),
        lease_ttl_seconds=args.lease_ttl_seconds,
    )
    return tq_gc_main(cli_args, runtime)


if __name__ == "__main__":
    sys.exit(main())
