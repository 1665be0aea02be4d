"""The tq-gc namespaces on a Redis server, for `tq-gc check`: publishers and sweepers on different
namespaces or databases each read as the other having no references."""

from __future__ import annotations

import re
from dataclasses import dataclass

import redis
from redis.exceptions import RedisError

from tq_gc.state.keys import CHECK_PROBE_NAMESPACE


@dataclass(frozen=True, slots=True)
class NamespaceSeen:
    """A tq-gc namespace found on a Redis server: whether an admission was ever recorded there (its
    admissions version, which nothing removes) and whether a sweeper recorded runs there."""

    database: int
    namespace: str
    admitted: bool
    swept: bool


_NAMESPACE_KEY = re.compile(r"^tqgc:\{([^{}]+)\}:(.*)$")


def namespaces_in_use(client: redis.Redis, current: int) -> list[NamespaceSeen]:
    """Every tq-gc namespace in each database that has keys (INFO keyspace, then SCAN), `current` being
    the database `client` selects. A database that refuses SELECT is left out; any other failure raises."""
    try:
        keyspace = client.info("keyspace")
    except RedisError:
        keyspace = {}  # INFO refused (some managed services): this database alone
    others = sorted({int(name[2:]) for name in keyspace if name[2:].isdigit()} - {current})
    seen = _namespaces_in(client, current)
    for database in others:
        other = _client_for(client, database)
        try:
            seen += _namespaces_in(other, database)
        except RedisError:
            continue  # another database we may not select (ACLs, a cluster): not ours to judge
        finally:
            other.close()
            other.connection_pool.disconnect()  # a pool handed in is not closed with its client
    return seen


def _namespaces_in(client: redis.Redis, database: int) -> list[NamespaceSeen]:
    suffixes: dict[str, set[str]] = {}
    for key in client.scan_iter(match="tqgc:{*}:*", count=1000):
        found = _NAMESPACE_KEY.match(key)
        if found and found[1] != CHECK_PROBE_NAMESPACE:
            suffixes.setdefault(found[1], set()).add(found[2])
    return [
        NamespaceSeen(database, namespace, "admissions:version" in kinds, "runs" in kinds)
        for namespace, kinds in sorted(suffixes.items())
    ]


def _client_for(client: redis.Redis, database: int) -> redis.Redis:
    """A client like `client` (same server, credentials, TLS, decoding) on another database."""
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "db": database}
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))
