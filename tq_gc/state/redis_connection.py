"""The state store's Redis connection: the state URL's own options (`?wait_replicas=`), the client made from
the URL (its timeouts, no retries), and the two rules every command follows (a failure is StoreUnavailable,
or StoreRefused when the store answered and refused this client; a write a failover must not lose waits for
the replicas).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
from redis import exceptions as redis_errors
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.exceptions import RedisError
from redis.retry import Retry

from tq_gc.config import redact_url
from tq_gc.config.models import STATE_URL_OPTIONS
from tq_gc.errors import ConfigError, StoreRefused, StoreUnavailable

# A hung Redis must end the sweep (StoreUnavailable), not hang it: no command of ours is slow.
CONNECT_TIMEOUT_SECONDS = 5.0
SOCKET_TIMEOUT_SECONDS = 10.0
# With a replicated Redis, `?wait_replicas=N` in the state URL (STATE_URL_OPTIONS): the writes a failover
# must not lose (an admission, a fence, an audit intent) return only once N replicas have them (WAIT)
# within this, or raise.
WAIT_TIMEOUT_MS = 1_000


@dataclass(frozen=True, slots=True)
class Replication:
    """How many replicas must acknowledge a durable write, and how long to wait for them."""

    replicas: int = 0
    timeout_ms: int = WAIT_TIMEOUT_MS

    @classmethod
    def split_from(cls, url: str) -> tuple[str, Replication]:
        """The URL without tq-gc's own options (redis-py refuses them), and those options."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {name: value for name, value in query if name.startswith("wait_")}
        rest = urlencode([(name, value) for name, value in query if not name.startswith("wait_")])
        if "wait_timeout_ms" in ours:
            raise ConfigError(
                f"state_url option wait_timeout_ms was removed: the wait for replicas is {WAIT_TIMEOUT_MS} ms"
            )
        unknown = sorted(set(ours) - set(STATE_URL_OPTIONS))
        if unknown:
            raise ConfigError(f"unknown state_url option {unknown[0]!r}: use {', '.join(STATE_URL_OPTIONS)}")
        replicas = _whole(ours, "wait_replicas", 0, minimum=0)
        if not ours:
            return url, cls(replicas)
        return url.split("?", 1)[0] + (f"?{rest}" if rest else ""), cls(replicas)


def _whole(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    if name not in options:
        return default
    value = options[name]
    if not value.isdigit() or int(value) < minimum:
        raise ConfigError(f"state_url option {name}={value!r} must be a whole number of at least {minimum}")
    return int(value)


def client_from_url(url: str) -> tuple[redis.Redis, Replication]:
    """A client of its own for a state URL, and the URL's replication options. No retries inside: a
    failure ends the sweep."""
    try:
        plain_url, replication = Replication.split_from(url)
    except ConfigError as exc:
        raise ConfigError(f"{redact_url(url)!r}: {exc}") from None
    try:
        client = redis.Redis.from_url(
            plain_url,
            decode_responses=True,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError:
        client = None
    if client is None:
        # redis-py's message (and its chain) may quote the URL, password included: say it ourselves,
        # outside the handler so that no part of it rides along as context.
        raise ConfigError(
            f"{redact_url(url)!r} is not a valid Redis URL: use redis://[:password@]host:6379/0, "
            "rediss://... or unix:///path/to/redis.sock"
        )
    return client, replication


def describe(connection_kwargs: Mapping[str, Any]) -> str:
    """A log-safe address for a client we were handed (no password: we never read it)."""
    if connection_kwargs.get("path"):
        return f"unix://{connection_kwargs['path']}"
    host = connection_kwargs.get("host", "localhost")
    return f"redis://{host}:{connection_kwargs.get('port', 6379)}/{connection_kwargs.get('db', 0)}"


ACL_NEEDED = (
    "an ACL user needs the keys `~tqgc:*` and the commands tq-gc runs: `+@read +@write +@scripting "
    "+@connection +time +exists +wait` (docs/safety.md)"
)
# Failures that are the store's, whoever asks: nobody can write (sweepers neither), so nothing is deleted.
_DOWN_FOR_EVERYONE: tuple[type[RedisError], ...] = (
    redis_errors.BusyLoadingError,  # LOADING: restarted, reading its data back
    redis_errors.ReadOnlyError,  # a replica, or a failover under way
    redis_errors.OutOfMemoryError,  # maxmemory reached: no write from anyone
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
)


def refusal_fix(exc: RedisError) -> str | None:
    """What this client must fix when the store answered and refused it; None when the store is down for
    everyone (refused connection, timeout, restart, read-only, out of memory)."""
    if isinstance(exc, _DOWN_FOR_EVERYONE):
        return None
    if isinstance(exc, redis_errors.AuthenticationError | redis_errors.AuthenticationWrongNumberOfArgsError):
        return "check the user name and password in the state URL (redis://user:password@host:6379/0)"
    if isinstance(exc, redis_errors.AuthorizationError | redis_errors.NoPermissionError):
        return ACL_NEEDED
    if isinstance(exc, redis_errors.MaxClientsReachedError):
        return "the server is at `maxclients`: raise it (CONFIG SET maxclients) or close idle clients"
    if isinstance(exc, redis_errors.MaxConnectionsError):
        return "this process's connection pool is full: close idle clients or raise max_connections"
    if isinstance(exc, redis_errors.ExternalAuthProviderError):
        return "check the credentials the authentication provider hands this client"
    if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
        return _tls_fix(exc)
    # A command or script refused (unknown or renamed command, NOSCRIPT, a script error), a reply this
    # client cannot read (a TLS port spoken to in plain text): the store answers, not to this client.
    return "check that the state URL names a Redis this client may script (redis:// or rediss://, its port)"


def _tls_fix(exc: BaseException) -> str | None:
    """The fix when a connection failed in its TLS handshake (an SSL error, or a handshake that never
    ended: rediss:// to a plain port waits for an answer that never comes); None otherwise."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError) or _in_handshake(cause):
            return (
                "TLS failed: use rediss:// for a TLS port and redis:// for a plain one, and check the "
                "certificates"
            )
        cause = cause.__cause__ or cause.__context__
    return None


def _in_handshake(exc: BaseException) -> bool:
    trace = exc.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_name == "do_handshake":
            return True
        trace = trace.tb_next
    return False


class RedisConnection:
    """The client every part of one RedisState uses, with its log-safe URL and replication options."""

    def __init__(self, client: redis.Redis, url: str) -> None:
        self.client = client
        self.url = url
        self.replication = Replication()

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        try:
            yield
        except RedisError as exc:
            fix = refusal_fix(exc)
            if fix is not None:
                raise StoreRefused(
                    f"state store {self.url} refused this client (it could not {action}): "
                    f"{type(exc).__name__}: {exc}",
                    fix,
                ) from exc
            raise StoreUnavailable(
                f"state store {self.url} failed to {action}: {type(exc).__name__}: {exc}"
            ) from exc

    def replicated(self, action: str) -> None:
        """After a write a failover must not lose: wait for the configured replicas to have it."""
        wanted = self.replication.replicas
        if wanted == 0:
            return
        with self.guard(f"wait for replicas to {action}"):
            acknowledged = int(self.client.wait(wanted, self.replication.timeout_ms))
        if acknowledged < wanted:
            raise StoreUnavailable(
                f"state store {self.url}: only {acknowledged} of {wanted} replicas acknowledged the write to "
                f"{action} within {self.replication.timeout_ms} ms; a failover could lose it"
            )

    def pipeline(self) -> Pipeline:
        return self.client.pipeline(transaction=False)
