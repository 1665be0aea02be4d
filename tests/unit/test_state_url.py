"""The state URL is read in one place (tq_gc/state/url.py): which store it names, and tq-gc's own
options in it. Every other module asks that one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tq_gc
from tq_gc.errors import ConfigError
from tq_gc.state.url import (
    Replication,
    is_memory_url,
    parse_state_url,
)

PACKAGE = Path(tq_gc.__file__).parent
# Where a URL is taken apart by hand: the parser itself, and the Ray cluster's address (not a state URL).
PARSERS = {"state/url.py", "ray_cluster.py"}
BY_HAND = re.compile(r"urlsplit\(|urlparse\(|parse_qsl?\(|startswith\(\"memory:|== MEMORY_SCHEME")


def test_no_module_but_the_parser_takes_a_state_url_apart() -> None:
    by_hand = {
        str(path.relative_to(PACKAGE)): BY_HAND.findall(path.read_text())
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in PARSERS and path.parts[-2] != "config"
    }
    assert not {module: found for module, found in by_hand.items() if found}


def test_memory_and_redis_urls_read() -> None:
    assert parse_state_url("memory://").is_memory and is_memory_url("MEMORY://x")
    plain = parse_state_url("redis://:pw@h:6379/1")
    assert (plain.is_memory, plain.redis_url, plain.replication) == (
        False,
        "redis://:pw@h:6379/1",
        Replication(),
    )
    assert "pw" not in plain.shown


def test_tq_gcs_own_options_leave_the_url_redis_py_takes() -> None:
    parsed = parse_state_url("redis://h/0?wait_replicas=2&ssl_cert_reqs=none")
    assert parsed.redis_url == "redis://h/0?ssl_cert_reqs=none"
    assert parsed.replication == Replication(2)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://h/0", "is not a state store URL"),
        ("redis://:secret@h/0?wait_replicas=x", "must be a whole number"),
        ("redis://:secret@h/0?wait_for=1", "unknown state_url option 'wait_for'"),
    ],
)
def test_a_wrong_state_url_is_refused_without_its_secret(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as refused:
        parse_state_url(url)
    assert "secret" not in str(refused.value)
