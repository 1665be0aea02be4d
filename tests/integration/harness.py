"""Helpers shared by integration tests that drive tq-gc as a user would: the CLI in its own process."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import subprocess_env

TQ_GC = Path(sys.executable).with_name("tq-gc")  # the console script users run


def cli_env() -> dict[str, str]:
    """The environment a CLI subprocess needs to join the test cluster, without TQGC_... variables:
    the config file alone says what the CLI does."""
    return {k: v for k, v in subprocess_env().items() if not k.startswith("TQGC_")}


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
