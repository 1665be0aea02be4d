"""No failing command prints a secret: every URL a command is given (the state store's, the
Pushgateway's, the Ray cluster's) is redacted on every error path, in its human and its --json form,
in what it prints and what it logs. Each secret holds MARKER, and nothing else printed does.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tools.testbed.redis_server import free_port
from tq_gc.cli import EXIT_OK, main
from tq_gc.stores import MemoryRowStore
from tq_gc.wiring import Runtime

MARKER = "s3cr3t"
STAGING = "rollout_staging"
KNOWN_USER = "tqgc-failures-user"
COMMANDS = [["check"], ["status"], ["sweep"], ["sweep", "--execute"], ["audit"], ["admissions"]]


def write_config(tmp_path: Path, state_url: str, **extra: object) -> Path:
    config = {
        "namespace": "secrets-failures",
        "state_url": state_url,
        "scope": [{"partition": STAGING, "all_keys": True}],
        **extra,
    }
    path = tmp_path / "gc.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_in_process(
    argv: list[str], capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[int, str]:
    """One command through the CLI's entry point: its exit code, and everything it printed or logged."""
    capfd.readouterr()
    caplog.clear()
    code = main(["--log-level", "DEBUG", *argv], Runtime(row_store=MemoryRowStore()))
    out, err = capfd.readouterr()
    return code, out + err + caplog.text


@pytest.fixture
def known_user(redis_url: str) -> Iterator[str]:
    """A user of the session's redis-server, with another password than the one the test gives."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.acl_setuser(KNOWN_USER, enabled=True, passwords=["+the-right-one"], keys=["*"],
                           commands=["+@all"])  # fmt: skip
        yield KNOWN_USER
    finally:
        client.acl_deluser(KNOWN_USER)
        client.close()


@pytest.mark.parametrize("user", [KNOWN_USER, "nobody"], ids=["wrong-password", "unknown-user"])
def test_a_wrong_redis_password_prints_no_secret(
    user: str,
    known_user: str,
    redis_url: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    config = write_config(tmp_path, f"redis://{user}:wrong-{MARKER}@127.0.0.1:{port}/0")
    for command in COMMANDS:
        for extra in ([], ["--json"]):
            code, output = run_in_process([*command, "--config", str(config), *extra], capfd, caplog)
            assert code != EXIT_OK, (command, output)  # refused: an error path
            assert MARKER not in output, (command, extra, output)


@pytest.mark.parametrize(
    "gateway",
    [
        f"http://tqgc:{MARKER}@127.0.0.1:{{port}}",
        f"tqgc:{MARKER}@127.0.0.1:{{port}}",
        f"https://tqgc:{MARKER}@127.0.0.1:{{port}}/prefix?token={MARKER}",
    ],
    ids=["http", "no-scheme", "https-and-query"],
)
def test_a_push_to_a_dead_gateway_with_credentials_prints_no_secret(
    gateway: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = write_config(tmp_path, "memory://")
    url = gateway.format(port=free_port())
    for extra in ([], ["--json"]):
        argv = ["sweep", "--config", str(config), "--pushgateway", url, *extra]
        code, output = run_in_process(argv, capfd, caplog)
        assert code == EXIT_OK, output  # a failed push never changes the exit code
        assert "could not push metrics" in output, output  # the failure is said...
        assert MARKER not in output, output  # ...without the secret


@pytest.mark.timeout(300)  # Ray's client gives up on a dead address after ~30 s, each command
def test_a_ray_address_with_credentials_prints_no_secret(tmp_path: Path) -> None:
    """The console script in a subprocess (Ray's own client, its warnings included), on a dead address."""
    ray_address = f"ray://tqgc:{MARKER}@127.0.0.1:{free_port()}"
    config = write_config(tmp_path, "memory://", transfer_queue={"ray_address": ray_address})
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for command in (["sweep", "--execute"], ["check", "--json"]):
        argv = [
            sys.executable,
            "-c",
            "from tq_gc.cli import run; run()",
            "--log-level",
            "DEBUG",
            *command,
            "--config",
            str(config),
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=environment, check=False)
        output = done.stdout + done.stderr
        assert done.returncode != EXIT_OK, output
        assert MARKER not in output, output
        assert "***" in output, output  # the address is still named
