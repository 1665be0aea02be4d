"""The state URL, parsed in one place: which state store it names (memory://, the embedded one, or Redis
by redis://, rediss://, unix://) and tq-gc's own option in it (wait_replicas), which
redis-py refuses. Light on purpose (urllib only): the trainer kit reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from tq_gc.errors import ConfigError
from tq_gc.redaction import redact_url

MEMORY_SCHEME = "memory"
REDIS_SCHEMES = ("redis", "rediss", "unix")
STATE_SCHEMES = (MEMORY_SCHEME, *REDIS_SCHEMES)
# With a replicated Redis, `?wait_replicas=N`: the writes a failover must not lose (an admission, a fence,
# an audit intent) return only once N replicas have them (WAIT) within this, or raise.
WAIT_TIMEOUT_MS = 1_000
_OPTION_PREFIX = "wait_"
STATE_URL_OPTIONS = ("wait_replicas",)


@dataclass(frozen=True, slots=True)
class Replication:
    """How many replicas must acknowledge a durable write, and how long to wait for them."""

    replicas: int = 0
    timeout_ms: int = WAIT_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class StateUrl:
    """A state URL, read: `url` as given (secrets included: show `shown`), its scheme, and for Redis the
    URL redis-py takes (tq-gc's options removed) with those options."""

    url: str
    scheme: str
    redis_url: str
    replication: Replication

    @property
    def is_memory(self) -> bool:
        return self.scheme == MEMORY_SCHEME

    @property
    def shown(self) -> str:
        return redact_url(self.url)


def parse_state_url(url: str) -> StateUrl:
    """Read a state URL; ConfigError (log-safe) when its scheme names no state store or an option of
    tq-gc's is unknown or not a whole number."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in STATE_SCHEMES:
        raise ConfigError(not_a_state_url(url))
    if scheme == MEMORY_SCHEME:
        return StateUrl(url, scheme, "", Replication())
    try:
        redis_url, replication = _split_options(url)
    except ConfigError as exc:
        raise ConfigError(f"{redact_url(url)!r}: {exc}") from None
    return StateUrl(url, scheme, redis_url, replication)


def is_memory_url(url: str) -> bool:
    """Whether a state URL names the embedded memory:// store (whatever else it holds)."""
    return urlsplit(url).scheme.lower() == MEMORY_SCHEME


def not_a_state_url(url: str) -> str:
    """What to say of a state_url whose scheme names no state store (log-safe)."""
    return (
        f"{redact_url(url)!r} is not a state store URL: use memory://, redis://host:6379/0, "
        "rediss://... or unix:///path/to/redis.sock"
    )


def _split_options(url: str) -> tuple[str, Replication]:
    """The URL without tq-gc's own options (redis-py refuses them), and those options."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {name: value for name, value in query if name.startswith(_OPTION_PREFIX)}
    rest = urlencode([(name, value) for name, value in query if not name.startswith(_OPTION_PREFIX)])
    if "wait_timeout_ms" in ours:
        removed = "state_url option wait_timeout_ms was removed"
        raise ConfigError(f"{removed}: the wait for replicas is {WAIT_TIMEOUT_MS} ms")
    unknown = sorted(set(ours) - set(STATE_URL_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown state_url option {unknown[0]!r}: use {', '.join(STATE_URL_OPTIONS)}")
    replication = Replication(_whole(ours, "wait_replicas", 0, minimum=0))
    if not ours:
        return url, replication
    return url.split("?", 1)[0] + (f"?{rest}" if rest else ""), replication


def _whole(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    if name not in options:
        return default
    value = options[name]
    if not value.isdigit() or int(value) < minimum:
        raise ConfigError(f"state_url option {name}={value!r} must be a whole number of at least {minimum}")
    return int(value)


__all__ = [
    "MEMORY_SCHEME",
    "REDIS_SCHEMES",
    "STATE_SCHEMES",
    "STATE_URL_OPTIONS",
    "Replication",
    "StateUrl",
    "is_memory_url",
    "not_a_state_url",
    "parse_state_url",
]
