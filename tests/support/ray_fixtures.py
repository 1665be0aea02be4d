"""Integration fixtures: one real Ray cluster and one real TransferQueue for the whole session.

    ray_cluster    a Ray head started as its own processes (`ray start --head --block`), so that
                   subprocesses (the tq-gc CLI) can join it at `ray_cluster.address`; this process
                   is connected to it as a driver
    tq             the `transfer_queue` module, with a TQ created by this process: pytest plays the
                   training job (the controller is not detached and lives as long as this driver)
    tq_partition   a fresh partition name per test; its keys are cleared afterwards
    put_rows       writes keyed rows (data and tags, or tags only) into TQ
    bare_ray_cluster  a second, tiny Ray head with no TQ at all, for one test's lifetime
    run_python     runs a Python snippet in a fresh interpreter (a process outside pytest)
    record_timing  record_timing(name, seconds): printed in the session's timings section

Everything is started lazily: tests that use none of these fixtures start no Ray. Tests that do
should carry `pytestmark = pytest.mark.ray`. Ray on a 2-core machine: 4 logical CPUs for the head
(controller + 2 storage units need 3), polling-mode controller.

Teardown stops only what these fixtures started, by process: `ray start --block` stops its cluster
on SIGTERM; whatever is left with the cluster's own temp dir in its command line is killed by pid.
Never `ray stop`: it kills every Ray process on the machine, other people's clusters included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

RAY_START_TIMEOUT_S = 120.0
RAY_STOP_TIMEOUT_S = 15.0
SUBPROCESS_TIMEOUT_S = 120.0
PUT_BATCH = 2000
REPO_ROOT = Path(__file__).resolve().parents[2]

TQ_TEST_CONF: dict[str, Any] = {
    "controller": {"polling_mode": True},
    "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {"num_data_storage_units": 2}},
}

# name -> seconds; printed at the end of the session (see pytest_terminal_summary)
TIMINGS: dict[str, float] = {}


def _record_timing(name: str, seconds: float) -> None:
    TIMINGS[name] = seconds


@pytest.fixture(scope="session")
def record_timing() -> Callable[[str, float], None]:
    """record_timing(name, seconds): listed in the session's "Ray / TransferQueue timings" section."""
    return _record_timing


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.section("Ray / TransferQueue timings")
        for name, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{name:<48} {seconds:8.3f} s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


# Test clusters run without token auth, whatever the machine has: `ray start` turns token auth on by
# itself when ~/.ray/auth_token exists (any earlier `ray.init()` writes one), and a driver joining by
# explicit address does not, so it would be refused. Production clusters with token auth need
# RAY_AUTH_MODE=token (and the token) in tq-gc's environment; that is Ray's business, not these tests'.
RAY_TEST_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def subprocess_env() -> dict[str, str]:
    """This environment without anything that would point Ray at another cluster."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TEST_ENV)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


class RayHead:
    """A Ray head node of our own: `ray start --head --block` in its own session, its own temp dir
    and ports, so several can run side by side. `stop()` leaves no process behind."""

    def __init__(self, num_cpus: int) -> None:
        self.num_cpus = num_cpus
        self.address = ""  # GCS address, host:port
        self.client_address = ""  # Ray Client, ray://host:port
        self.started_in_s = 0.0
        self.temp_dir = Path(tempfile.mkdtemp(prefix="tqgc-ray-"))  # short: Ray's socket paths are
        self._log = self.temp_dir / "ray-start.log"  # limited to ~107 characters
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> RayHead:
        import ray.util

        node_ip = ray.util.get_node_ip_address()
        port, client_port = _free_port(), _free_port()
        ray_bin = Path(sys.executable).with_name("ray")
        command = [
            str(ray_bin), "start", "--head", "--block",
            f"--num-cpus={self.num_cpus}",
            f"--node-ip-address={node_ip}",
            f"--port={port}",
            f"--temp-dir={self.temp_dir}",
            "--include-dashboard=false",
            "--include-log-monitor=false",
            "--disable-usage-stats",
            "--log-color=false",
            # every port of our own, so a second cluster (ours or anyone's) cannot collide
            f"--ray-client-server-port={client_port}",
            f"--dashboard-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
            f"--dashboard-agent-grpc-port={_free_port()}",
            f"--runtime-env-agent-port={_free_port()}",
            f"--metrics-export-port={_free_port()}",
        ]  # fmt: skip
        started = time.monotonic()
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=subprocess_env(), start_new_session=True
            )
        try:
            self._wait_started(started)
        except BaseException:
            self.stop()
            raise
        self.address = f"{node_ip}:{port}"
        self.client_address = f"ray://{node_ip}:{client_port}"
        self.started_in_s = time.monotonic() - started
        return self

    def _wait_started(self, started: float) -> None:
        assert self._process is not None
        while time.monotonic() - started < RAY_START_TIMEOUT_S:
            text = self._log.read_text(errors="replace")
            if "Ray runtime started" in text:
                return
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"`ray start --head` exited with {self._process.returncode}:\n{text[-3000:]}"
                )
            time.sleep(0.1)
        raise RuntimeError(
            f"`ray start --head` not up after {RAY_START_TIMEOUT_S:g} s:\n{self._log.read_text()}"
        )

    def stop(self) -> None:
        raylets = [pid for pid, cmdline, _ in self._processes() if b"/raylet/raylet" in cmdline]
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # `ray start --block` then stops its processes
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(RAY_STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the head's session: ours alone
            process.wait()
        self._kill_leftovers(raylets)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _kill_leftovers(self, raylets: list[int]) -> None:
        """Kill, by pid, whatever of this cluster is still running: processes with its temp dir in
        their command line, and workers of its raylet (they run in sessions of their own, under a
        `ray::...` title, with RAY_RAYLET_PID in their environment)."""
        deadline = time.monotonic() + 10.0
        while True:
            left = self._processes(raylets)
            if not left or time.monotonic() > deadline:
                break
            for pid, _, _ in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def _processes(self, raylets: Sequence[int] = ()) -> list[tuple[int, bytes, bytes]]:
        marker = str(self.temp_dir).encode()
        worker_of = {f"RAY_RAYLET_PID={pid}".encode() for pid in raylets}
        found = []
        for pid, cmdline, environ in _live_processes():
            if pid == os.getpid():
                continue
            if marker in cmdline or worker_of.intersection(environ.split(b"\0")):
                found.append((pid, cmdline, environ))
        return found


def _live_processes() -> Iterator[tuple[int, bytes, bytes]]:
    """(pid, cmdline, environ) of every process that is not a zombie."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(") ", 1)[1][:1]
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if state != "Z":
            yield int(entry.name), cmdline, environ


@dataclass(frozen=True)
class RayCluster:
    address: str  # the GCS address, host:port: `ray.init(address=...)`, `transfer_queue.ray_address`
    client_address: str  # Ray Client, ray://host:port
    temp_dir: Path


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """The session's Ray cluster, with this process connected to it as a driver."""
    import ray

    saved_env = {name: os.environ.get(name) for name in RAY_TEST_ENV}
    os.environ.update(RAY_TEST_ENV)
    head = RayHead(num_cpus=4)
    try:
        head.start()
        _record_timing("ray start --head (session cluster)", head.started_in_s)
        started = time.monotonic()
        ray.init(address=head.address, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        _record_timing("ray.init from pytest (join)", time.monotonic() - started)
        yield RayCluster(head.address, head.client_address, head.temp_dir)
    finally:
        ray.shutdown()
        started = time.monotonic()
        head.stop()
        _record_timing("stop session cluster", time.monotonic() - started)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def tq(ray_cluster: RayCluster) -> Iterator[Any]:
    """The `transfer_queue` module with a real TQ that this process created (and so may close)."""
    import ray
    import transfer_queue

    try:
        ray.get_actor("TransferQueueController", namespace="transfer_queue")
    except ValueError:
        pass
    else:
        raise RuntimeError("the session's fresh Ray cluster already has a TransferQueueController")
    started = time.monotonic()
    transfer_queue.init(TQ_TEST_CONF)
    _record_timing("tq.init (controller + 2 storage units)", time.monotonic() - started)
    # No teardown of its own: the controller and storage units are not detached, so they end with this
    # driver's Ray connection, which ray_cluster closes before it stops the head.
    yield transfer_queue


@contextlib.contextmanager
def fresh_partition(tq: Any, prefix: str = "tqgc-test") -> Iterator[str]:
    """A partition name no other test uses; whatever keys it holds afterwards are cleared."""
    partition = f"{prefix}-{uuid.uuid4().hex[:10]}"
    yield partition
    keys = list(tq.kv_list(partition).get(partition, {}))
    for start in range(0, len(keys), PUT_BATCH):
        tq.kv_clear(keys[start : start + PUT_BATCH], partition)


@pytest.fixture
def tq_partition(tq: Any) -> Iterator[str]:
    with fresh_partition(tq) as partition:
        yield partition


PutRows = Callable[..., None]


@pytest.fixture
def put_rows(tq: Any) -> PutRows:
    """put_rows(partition, keys, tags=None, data=True): write keyed rows, in batches.

    `tags` is one mapping for every row, or a sequence with one per key. data=False writes tags only
    (TQ registers the keys without data, like a put that died halfway: a ghost key)."""
    import torch
    from tensordict import TensorDict

    def put(
        partition: str,
        keys: Sequence[str],
        tags: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        data: bool = True,
    ) -> None:
        keys = list(keys)
        if tags is None or isinstance(tags, Mapping):
            per_key = [dict(tags or {}) for _ in keys]
        else:
            per_key = [dict(t) for t in tags]
        for start in range(0, len(keys), PUT_BATCH):
            batch = keys[start : start + PUT_BATCH]
            batch_tags = per_key[start : start + PUT_BATCH]
            fields = TensorDict({"x": torch.zeros(len(batch), 4)}, batch_size=len(batch)) if data else None
            tq.kv_batch_put(keys=batch, partition_id=partition, fields=fields, tags=batch_tags)

    return put


@pytest.fixture
def bare_ray_cluster() -> Iterator[RayCluster]:
    """A second Ray cluster with no TQ, for one test. This process does not join it."""
    head = RayHead(num_cpus=1)
    try:
        head.start()
        _record_timing("ray start --head (bare cluster, 1 CPU)", head.started_in_s)
        yield RayCluster(head.address, head.client_address, head.temp_dir)
    finally:
        head.stop()


RunPython = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_python() -> RunPython:
    """run_python(code, timeout_seconds=...): run `code` in a fresh interpreter of this venv."""

    def run(code: str, timeout_seconds: float = SUBPROCESS_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_seconds,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )

    return run
