"""A publisher the store refuses (wrong password, an ACL user without the rights, maxclients) is told at
once, on a real redis-server: the sweepers may reach that store, so its blocks must not run unprotected.
A store down for everyone still lets the job go on (tests/integration/test_trainer_kit.py)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import yaml

from tools.testbed.redis_server import RedisServer
from tq_gc.cli import main
from tq_gc.errors import StoreRefused
from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.wiring import Runtime

from support.scripted_store import ScriptedRowStore
from support.world import STAGING


def config_for(url: str) -> dict[str, Any]:
    return {"namespace": "job-7", "state_url": url, "scope": [{"partition": STAGING, "all_keys": True}]}


def run_cli(tmp_path: Path, config: dict[str, Any], rows: ScriptedRowStore, *args: str) -> int:
    path = tmp_path / "gc.yaml"
    path.write_text(yaml.safe_dump(config))
    return main([args[0], "--config", str(path), "--json", *args[1:]], Runtime(row_store=rows))


WAIT_S = 20.0


def _user_url(base_url: str, user: str, password: str) -> str:
    parts = urlsplit(base_url)
    return f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0"


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[Callable[..., str]]:
    """Makes ACL users on the session's Redis (rules as ACL SETUSER takes them); deleted after the test."""
    admin = redis.Redis.from_url(redis_url)
    made: list[str] = []

    def make(*rules: str, password: str = "right-pw") -> str:
        name = f"pub-{secrets.token_hex(4)}"
        admin.acl_setuser(name, enabled=True, passwords=[f"+{password}"], reset=True)
        admin.execute_command("ACL", "SETUSER", name, *rules)
        made.append(name)
        return name

    yield make
    for name in made:
        admin.acl_deluser(name)
    admin.close()


REFUSALS: dict[str, tuple[tuple[str, ...], str]] = {
    # a user that may read but neither script nor write
    "without scripting": (("~*", "+@read", "+@connection", "+time"), "right-pw"),
    # a user with every right, reached with the wrong password
    "wrong password": (("~*", "+@all"), "wrong-pw"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_publisher_raises_in_holding_and_checkpoint_fence(
    case: str, redis_url: str, acl_user: Callable[..., str]
) -> None:
    rules, password = REFUSALS[case]
    user = acl_user(*rules)
    with GcClient.connect(_user_url(redis_url, user, password), "job") as gc:
        ran = []
        with pytest.raises(StoreRefused, match="Fix:"), gc.holding("call-1", {STAGING: ["k"]}):
            ran.append("holding")
        with pytest.raises(StoreRefused, match="Fix:"), gc.checkpoint_fence("ckpt-1"):
            ran.append("fence")
        assert ran == []  # neither block ran unprotected


def test_a_refusal_can_be_let_through_when_asked_for(redis_url: str, acl_user: Callable[..., str]) -> None:
    user = acl_user("~*", "+@read", "+@connection", "+time")
    url = _user_url(redis_url, user, "right-pw")
    with GcClient.connect(url, "job", on_refused="continue") as gc:
        ran = []
        with gc.holding("call-1", {STAGING: ["k"]}), gc.checkpoint_fence("ckpt-1"):
            ran.append("both")
        assert ran == ["both"]


def test_a_publisher_refused_mid_block_is_told_at_the_block_end(
    redis_url: str, acl_user: Callable[..., str]
) -> None:
    """Its rights taken away while a block runs (a password rotated, an ACL changed): the renewer is
    refused, and the block's end raises, so that the job knows its rows went unprotected."""
    user = acl_user("~*", "+@all")
    admin = redis.Redis.from_url(redis_url)
    reader = AdmissionRegistry.connect(redis_url, "job")
    gc = GcClient.connect(_user_url(redis_url, user, "right-pw"), "job", ttl_seconds=1.5)
    with gc, pytest.raises(StoreRefused), gc.holding("call-1", {STAGING: ["k"]}):
        assert set(reader.live()) == {"call-1"}
        admin.execute_command("ACL", "SETUSER", user, "-@scripting")
        deadline = time.monotonic() + WAIT_S
        while reader.live():  # no renewal lands: the admission lapses after its TTL
            assert time.monotonic() < deadline, "the admission was still renewed"
            time.sleep(0.05)
    reader.close()
    admin.close()


def test_a_publisher_refused_at_maxclients_raises() -> None:
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        admin.ping()  # this connection stays: the server holds one client
        admin.config_set("maxclients", 1)
        try:
            with GcClient.connect(server.url, "job") as gc:
                with pytest.raises(StoreRefused, match="maxclients"), gc.holding("c", {STAGING: ["k"]}):
                    pass
                with pytest.raises(StoreRefused, match="maxclients"), gc.checkpoint_fence("ckpt-1"):
                    pass
        finally:
            admin.config_set("maxclients", 10000)
            admin.close()


def test_a_store_down_for_everyone_is_not_a_refusal() -> None:
    server = RedisServer().start()
    url = server.url
    server.stop()
    with GcClient.connect(url, "job") as gc:
        ran = []
        with gc.holding("c", {STAGING: ["k"]}), gc.checkpoint_fence("ckpt-1", wait_seconds=1.0):
            ran.append("both")
        assert ran == ["both"]


def _publisher_rights(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    rows = ScriptedRowStore()
    rows.put(STAGING, "r1/c1")
    run_cli(tmp_path, config_for(url), rows, "check")
    doc = json.loads(capsys.readouterr().out)
    [rights] = [c for c in doc["checks"] if c["name"] == "publisher rights"]
    return rights


def test_check_exercises_a_publishers_rights(
    tmp_path: Path, redis_url: str, acl_user: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    reader = AdmissionRegistry.connect(redis_url, "job-7")
    assert _publisher_rights(tmp_path, redis_url, capsys)["ok"]
    assert (reader.live(), reader.fences()) == ({}, {})  # the probes were taken back
    reader.close()
    # a sweeper-side user that may read but not write: check fails and says what to grant
    user = acl_user("~*", "+@read", "+@connection", "+time", "+config|get", "+info")
    rights = _publisher_rights(tmp_path, _user_url(redis_url, user, "right-pw"), capsys)
    assert not rights["ok"] and "Fix:" in rights["detail"] and "right-pw" not in rights["detail"]


def test_a_tls_client_on_a_plain_port_is_refused_not_down() -> None:
    """rediss:// to a plain port: the handshake never ends, which is not the store being down."""
    with RedisServer() as server:
        url = server.url.replace("redis://", "rediss://")
        with GcClient.connect(url, "job") as gc:
            with pytest.raises(StoreRefused, match="TLS"), gc.holding("c", {STAGING: ["k"]}):
                pass
            with pytest.raises(StoreRefused, match="TLS"), gc.checkpoint_fence("ckpt-1"):
                pass


def test_a_fence_refused_mid_checkpoint_is_told_at_its_end(
    redis_url: str, acl_user: Callable[..., str]
) -> None:
    user = acl_user("~*", "+@all")
    admin = redis.Redis.from_url(redis_url)
    reader = AdmissionRegistry.connect(redis_url, "job")
    gc = GcClient.connect(_user_url(redis_url, user, "right-pw"), "job")
    with gc, pytest.raises(StoreRefused), gc.checkpoint_fence("ckpt-1", ttl_seconds=1.5):
        assert set(reader.fences()) == {"ckpt-1"}
        admin.execute_command("ACL", "SETUSER", user, "-@scripting")
        deadline = time.monotonic() + WAIT_S
        while reader.fences():  # no renewal lands: the fence lapses after its TTL
            assert time.monotonic() < deadline, "the fence was still renewed"
            time.sleep(0.05)
    reader.close()
    admin.close()
