"""A Ray head of its own, for tests and the soak: `ray start --head --block` as its own processes, in
its own temp dir and on its own ports, so that several can run side by side and subprocesses (the tq-gc
CLI) can join it at `address`; `stop()` leaves no process behind.

Stopping kills only what the head started, by process: `ray start --block` stops its cluster on SIGTERM;
whatever is left with the cluster's own temp dir in its command line is killed by pid. Never `ray stop`:
it kills every Ray process on the machine, other people's clusters included. Ray on a 2-core machine:
TQ_TEST_CONF is a polling-mode controller and 2 storage units (a head of 4 logical CPUs fits them).
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RAY_START_TIMEOUT_S = 120.0
RAY_STOP_TIMEOUT_S = 15.0
REPO_ROOT = Path(__file__).resolve().parents[2]

TQ_TEST_CONF: dict[str, Any] = {
    "controller": {"polling_mode": True},
    "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {"num_data_storage_units": 2}},
}


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
