"""Chaos test helpers: CLI processes that are always reaped, a job's worth of rows and references,
and polling with deadlines.

Every `tq-gc` process runs in a session of its own, so a test can SIGKILL it (and anything it
spawned) by process group, and the `processes` fixture kills whatever is left at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml
from harness import CliResult

from tools.testbed.cli import TQ_GC, cli_env
from tools.testbed.tuned_cli import JOB_NEVER_IDLE_MS, row_store_factory, tuned_cli_command
from tq_gc.wiring import Runtime

CLI_TIMEOUT_S = 90.0
POLL_S = 0.02  # chaos polls TQ while a sweep deletes: finer than the default

RecordTiming = Callable[[str, float], None]


@dataclass
class Cli:
    """One `tq-gc` process, its output in files (a pipe nobody reads could fill up and block it)."""

    args: tuple[str, ...]
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and its session (the CLI's and anything it started), then reap it.
        Only while it is unreaped: its pid, and so the group id, cannot have been reused yet."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait(self, timeout_seconds: float = CLI_TIMEOUT_S) -> CliResult:
        """Wait for the exit (killed if it outlives timeout_seconds: the test fails with its output)."""
        try:
            self.process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            command = " ".join(self.args)
            why = self.result().why()
            raise AssertionError(f"tq-gc {command} outlived {timeout_seconds:g} s:\n{why}") from None
        return self.result()

    def result(self) -> CliResult:
        return CliResult(
            self.process.returncode if self.process.returncode is not None else -1,
            self.stdout_path.read_text(errors="replace"),
            self.stderr_path.read_text(errors="replace"),
            time.monotonic() - self.started,
        )


class Processes:
    """Starts `tq-gc` processes; close() kills (SIGKILL, by group) and reaps any still running."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._started: list[Cli] = []

    def start(self, *args: str, command: Sequence[str] = (str(TQ_GC),)) -> Cli:
        """`command` (the `tq-gc` console script, or a Job's tuned CLI) with `args`."""
        n = len(self._started)
        stdout_path, stderr_path = self.workdir / f"cli-{n}.out", self.workdir / f"cli-{n}.err"
        with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [*command, *args],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=cli_env(),
                start_new_session=True,  # its own process group: killpg reaches all of it
            )
        cli = Cli(tuple(args), process, stdout_path, stderr_path)
        self._started.append(cli)
        return cli

    def run(
        self, *args: str, command: Sequence[str] = (str(TQ_GC),), timeout_seconds: float = CLI_TIMEOUT_S
    ) -> CliResult:
        return self.start(*args, command=command).wait(timeout_seconds)

    def close(self) -> None:
        for cli in self._started:
            cli.kill()


def assert_readable(tq: Any, partition: str, keys: Sequence[str]) -> None:
    """Every key is there with its data (put_rows writes a zero 4-vector per row)."""
    keys = sorted(keys)
    rows = tq.kv_batch_get(keys, partition)["x"].unbind()  # a jagged nested tensor, one row per key
    assert [(tuple(row.shape), float(row.abs().sum())) for row in rows] == [((4,), 0.0)] * len(keys)


def wait_for_deletes(
    tq: Any, partition: str, total: int, at_least: int, sweeper: Cli, timeout_seconds: float
) -> int:
    """Poll TQ until the sweeper has deleted at least `at_least` rows; return how many are left then.
    Fails (with the sweeper's output) if it exits first."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        left = len(tq.kv_list(partition).get(partition, {}))
        if left <= total - at_least:
            return left
        if not sweeper.running():
            why = sweeper.result().why()
            hint = ""
            if '"within_grace": ' in why and left == total:
                hint = " (if every orphan is within grace, its lease came more than a grace after the last "
                hint += "observation: raise SUBPROCESS_LEASE_WITHIN_S)"
            raise AssertionError(f"the sweep ended with {left} of {total} rows left{hint}:\n{why}")
        if time.monotonic() > deadline:
            why = sweeper.result().why()
            raise AssertionError(f"{left} of {total} rows left after {timeout_seconds:g} s:\n{why}")
        time.sleep(POLL_S)


@dataclass
class Job:
    """A partition full of orphans, plus rows a live admission and an active manifest hold."""

    partition: str
    config: Path
    namespace: str
    orphans: set[str]
    admitted: set[str]
    manifested: set[str]
    state_url: str
    # What the test tunes and users cannot (tools/testbed/tuned_cli.py): the store's delete batch and the
    # sweep lease's TTL. And its pacing never steps aside for an idle job (JOB_NEVER_IDLE_MS): a sweeper is
    # killed mid-delete, and an idle job's deletes go at once, too fast to catch on a busy machine.
    batch: int
    lease_ttl_s: float
    # How hard its sweepers press on the TQ: chosen where each starts (`tq-gc --duty-cycle`).
    duty_cycle: float

    @property
    def cli(self) -> list[str]:
        """The command of this job's CLI subprocesses: `tq-gc` over the job's tuning."""
        return tuned_cli_command(self.batch, self.lease_ttl_s, job_idle_ms=JOB_NEVER_IDLE_MS)

    def runtime(self) -> Runtime:
        """The job's tuning, for the CLI run in this process."""
        factory = row_store_factory(self.batch, job_idle_ms=JOB_NEVER_IDLE_MS)
        return Runtime(row_store_factory=factory, lease_ttl_seconds=self.lease_ttl_s)

    @property
    def referenced(self) -> set[str]:
        return self.admitted | self.manifested

    @property
    def all_keys(self) -> set[str]:
        return self.orphans | self.referenced

    def sweep_args(self) -> tuple[str, ...]:
        return (*self.dry_run_args(), "--execute")

    def dry_run_args(self) -> tuple[str, ...]:
        return ("--duty-cycle", str(self.duty_cycle), "sweep", "--config", str(self.config), "--json")


def write_manifest(directory: Path, partition: str, keys: Sequence[str]) -> Path:
    path = directory / "ckpt-000001" / "gc-manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": "tq-gc/manifest/v1",
        "manifest_id": "ckpt-000001",
        "state": "active",
        "rows": {partition: sorted(keys)},
    }
    path.write_text(json.dumps(doc))
    return path


def write_config(path: Path, **values: Any) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def redis_snapshot(url: str) -> dict[bytes, tuple[bytes, Any]]:
    """Every key of the Redis database at `url` with its type and value (TTLs left out: they tick):
    two equal snapshots around an interval mean nobody wrote in it."""
    client = redis.Redis.from_url(url)
    try:
        return {key: _type_and_value(client, key) for key in client.scan_iter(count=1000)}
    finally:
        client.close()


def _type_and_value(client: redis.Redis, key: bytes) -> tuple[bytes, Any]:
    kind: bytes = client.type(key)
    readers: dict[bytes, Callable[[], Any]] = {
        b"string": lambda: client.get(key),
        b"hash": lambda: client.hgetall(key),
        b"list": lambda: client.lrange(key, 0, -1),
        b"set": lambda: sorted(client.smembers(key)),
        b"zset": lambda: client.zrange(key, 0, -1, withscores=True),
        b"stream": lambda: client.xrange(key),
    }
    return kind, readers.get(kind, lambda: None)()
