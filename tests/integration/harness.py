"""Helpers shared by integration tests that drive tq-gc as a user would: the CLI in its own process
(its console script and environment: tools/testbed/cli.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from support.logger_state import tq_gc_logger_restored

# Deadlines for a 2-core machine loaded 10 deep (each ~10 times what it takes unloaded), from which tests
# derive their grace: grace accrues only over observed time, and a stretch longer than the grace from
# one sweep's plan to the next sweep's lease restarts every row's clock.
# A `tq-gc sweep` subprocess takes its lease ~1 s after it starts (Python, tq_gc, the config, Redis; it
# imports TransferQueue and joins Ray after the lease).
SUBPROCESS_LEASE_WITHIN_S = 8.0
# A sweep ends within seconds of its plan (it records what it saw, asks the barrier, records its run).
SWEEP_TAIL_WITHIN_S = 8.0


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    seconds: float

    def json(self) -> dict[str, Any]:
        """`--json` prints exactly one JSON document on stdout."""
        doc = json.loads(self.stdout)
        assert isinstance(doc, dict), self.stdout
        return doc

    def why(self) -> str:
        return (
            f"exit {self.code} after {self.seconds:.1f} s\n"
            f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-4000:]}"
        )


def wait_until(what: str, predicate: Callable[[], Any], timeout_seconds: float, poll_s: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_seconds:g} s: {what}")
        time.sleep(poll_s)


def keys_in(tq: Any, partition: str) -> set[str]:
    return set(tq.kv_list(partition).get(partition, {}))


def tq_gc_in_process(capsys: Any, *args: str, runtime: Any = None) -> CliResult:
    """Run the `tq-gc` CLI in this process (it attaches to the session's TQ in well under a second,
    where a fresh process needs ~6 s to import TransferQueue and join Ray). Leaves the `tq_gc`
    logger as it found it (the CLI points it at the captured stderr). `runtime`: a test's own tuning
    (tools/testbed/tuned_cli.py), else the CLI's."""
    from tq_gc.cli import main

    capsys.readouterr()
    started = time.monotonic()
    with tq_gc_logger_restored():
        code = main(list(args), runtime)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err, time.monotonic() - started)
