"""A real, throwaway redis-server for tests and the soak: free port, no persistence unless asked (an
append-only file), stopped without fail; KillableRedisServer also kills, freezes, restarts empty or with
its data, or turns read-only the server it started."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class RedisServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """`with RedisServer() as server: server.url`, or start() / stop(). RedisServer(port) starts on that
    port (a Redis restarted where its clients expect it), else on a free one. `appendonly`: every write
    goes to an append-only file, fsynced at once, that a restart reads back."""

    def __init__(self, port: int = 0, *, appendonly: bool = False) -> None:
        self.port = port
        self.appendonly = appendonly
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError(
                "redis-server not found: install it with `apt-get install redis-server` "
                "(or run scripts/test, which does)"
            )
        self._dir = tempfile.TemporaryDirectory(prefix="tqgc-redis-")
        try:
            if self.port and self._spawn(binary, Path(self._dir.name)):
                return self
            # The port may be taken between free_port() and the bind: try a few.
            for _ in range(0 if self.port else 3):
                self.port = free_port()
                if self._spawn(binary, Path(self._dir.name)):
                    return self
            raise RedisServerError(f"redis-server did not start; its log:\n{self._log()}")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, binary: str, workdir: Path) -> bool:
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        persistence = ["yes", "--appendfsync", "always"] if self.appendonly else ["no"]
        args += ["--appendonly", *persistence]
        with (workdir / "redis.log").open("ab") as log:
            self._process = subprocess.Popen(args, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
        if self._wait_for_ping():
            return True
        self._terminate()
        return False

    def _wait_for_ping(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, socket_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.ConnectionError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def _log(self) -> str:
        if self._dir is None:
            return ""
        path = Path(self._dir.name) / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self) -> None:
        self._terminate()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class KillableRedisServer(RedisServer):
    """A per-test redis-server that a test can kill (SIGKILL), freeze (SIGSTOP), restart empty on the
    same port, or turn into a read-only replica (a failover that left clients on the old primary)."""

    def restart_empty(self) -> None:
        """SHUTDOWN NOSAVE, then a fresh server on the same port: every key gone, as after a restart of
        a Redis without persistence (with `appendonly`, its file is removed first: the file lost too).
        Clients reconnect by themselves on their next call."""
        self.shut_down()
        assert self._dir is not None
        for path in Path(self._dir.name).iterdir():
            if path.is_dir():
                shutil.rmtree(path)
            elif path.name != "redis.log":
                path.unlink()
        self.start_again()

    def restart_with_data(self) -> None:
        """A Redis restarted with its data (an append-only file; the server must have been started with
        `appendonly=True`): the same keys, a new server process (a new INFO run_id)."""
        assert self.appendonly, "restarting with data needs appendonly=True"
        self.shut_down()
        self.start_again()

    def shut_down(self) -> None:
        """SHUTDOWN NOSAVE and wait for the process to end; the port refuses connections until
        start_again(). With `appendonly`, every write is in the file already (appendfsync always)."""
        process = self._process
        assert process is not None and process.poll() is None and self._dir is not None
        # No retries: redis-py would otherwise reconnect, for seconds, to the server it just stopped.
        client = redis.Redis(port=self.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # the server closed the connection on its way out: what SHUTDOWN does
        finally:
            client.close()
        process.wait(timeout=10)
        self._process = None

    def start_again(self) -> None:
        """Start the server again on its port, in its directory (with its append-only file, if any)."""
        assert self._process is None and self._dir is not None, "shut_down() first"
        binary = shutil.which("redis-server")
        assert binary is not None
        if not self._spawn(binary, Path(self._dir.name)):
            raise RedisServerError(f"redis-server did not restart on port {self.port}:\n{self._log()}")

    def make_read_only(self) -> None:
        """REPLICAOF an address nobody serves: the data stays, every write fails with READONLY."""
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            dead_port = unused.getsockname()[1]
        self._replicaof("127.0.0.1", dead_port)

    def make_writable(self) -> None:
        self._replicaof("NO", "ONE")

    def _replicaof(self, host: str, port: int | str) -> None:
        client = redis.Redis(port=self.port, socket_timeout=5)
        try:
            client.replicaof(host, port)
        finally:
            client.close()

    def signal(self, sig: signal.Signals) -> None:
        process = self._process
        assert process is not None and process.poll() is None, "redis-server is not running"
        process.send_signal(sig)
        if sig == signal.SIGKILL:
            process.wait(timeout=10)

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a frozen server could not act on stop()'s SIGTERM
        super().stop()
