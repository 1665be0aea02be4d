"""The shared state store (`redis://`, `rediss://`, `unix://`), used by the sidecar, the CronJob and the CLI.

Every time is read from Redis (`TIME`, or `redis.call('TIME')` inside a script), never from this host:
expiries of admissions and fences are computed inside Lua scripts, so a publisher's host clock and the
collector's host clock never enter the comparison. Key schema and caps: tq_gc/state/keys.py.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.exceptions import RedisError
from redis.retry import Retry

from tq_gc.config import redact_url
from tq_gc.errors import ConfigError, FenceRaised, LeaseLost, StoreUnavailable
from tq_gc.first_seen import FirstSeen, FirstSeenRecords
from tq_gc.model import AuditBatch, DeletedRow
from tq_gc.state import generations
from tq_gc.state import redis_scripts as scripts
from tq_gc.state.base import AdmissionRows, Lease, Recheck, copied_admissions, new_version
from tq_gc.state.keys import (
    AUDIT_MAXLEN,
    AUDIT_PAGE,
    GENERATION_ROWS,
    RUNS_KEPT,
    Keys,
    check_namespace,
)

log = logging.getLogger(__name__)

# A hung Redis must end the sweep (StoreUnavailable), not hang it: no command of ours is slow.
CONNECT_TIMEOUT_SECONDS = 5.0
SOCKET_TIMEOUT_SECONDS = 10.0
# With a replicated Redis, `?wait_replicas=N` in the state URL: the writes a failover must not lose (an
# admission, a fence, an audit intent) return only once N replicas have them (WAIT), or raise.
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
        unknown = sorted(set(ours) - {"wait_replicas", "wait_timeout_ms"})
        if unknown:
            raise ConfigError(f"unknown state_url option {unknown[0]!r}: use wait_replicas, wait_timeout_ms")
        replicas = _whole(ours, "wait_replicas", 0, minimum=0)
        timeout_ms = _whole(ours, "wait_timeout_ms", WAIT_TIMEOUT_MS, minimum=1)
        if not ours:
            return url, cls(replicas, timeout_ms)
        return url.split("?", 1)[0] + (f"?{rest}" if rest else ""), cls(replicas, timeout_ms)


def _whole(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    if name not in options:
        return default
    value = options[name]
    if not value.isdigit() or int(value) < minimum:
        raise ConfigError(f"state_url option {name}={value!r} must be a whole number of at least {minimum}")
    return int(value)


# Reads of a partition's records, or saves, before "kept changing" (only a lease holder writes them).
LAYOUT_READS = 3


class RedisState:
    def __init__(
        self, client: redis.Redis, namespace: str, owns_client: bool, *, url: str | None = None
    ) -> None:
        kwargs = client.connection_pool.connection_kwargs
        if not kwargs.get("decode_responses"):
            raise ValueError("RedisState needs a client made with decode_responses=True")
        self.namespace = check_namespace(namespace)
        self.url = redact_url(url) if url is not None else _describe(kwargs)
        self._client = client
        self._owns_client = owns_client
        self._keys = Keys(namespace)
        self._layouts: dict[str, generations.Layout] = {}  # loaded, for the save that follows
        self._saved: dict[str, generations.Saved] = {}  # our last save, for the load that follows
        self.generation_rows = GENERATION_ROWS  # rows a generation field holds (tests make it small)
        # admission id -> (its document, the rows decoded from it), as last read
        self._admissions_read: dict[str, tuple[str, AdmissionRows]] = {}
        register = client.register_script
        self._admit = register(scripts.ADMIT)
        self._save_first_seen = register(scripts.SAVE_FIRST_SEEN)
        self._forget_partition = register(scripts.FORGET_PARTITION)
        self._record_intent = register(scripts.RECORD_INTENT)
        self._confirm_deletes = register(scripts.CONFIRM_DELETES)
        self._record_run = register(scripts.RECORD_RUN)
        self._record_source_counts = register(scripts.RECORD_SOURCE_COUNTS)
        self._recheck = register(scripts.RECHECK)
        self._renew_admission = register(scripts.RENEW_ADMISSION)
        self._live_admissions = register(scripts.LIVE_ADMISSIONS)
        self._raise_fence = register(scripts.RAISE_FENCE)
        self._live_fences = register(scripts.LIVE_FENCES)
        self._release_lease = register(scripts.RELEASE_LEASE)
        self._lease_holder = register(scripts.LEASE_HOLDER)
        self.replication = Replication()
        self._acquire_lease = register(scripts.ACQUIRE_LEASE)
        self._admitted_since = register(scripts.ADMITTED_SINCE)
        self._barrier = BarrierCopy()

    @classmethod
    def from_url(cls, url: str, namespace: str) -> RedisState:
        """A store with its own client; close() closes it. No retries inside: a failure ends the sweep.
        `?wait_replicas=N[&wait_timeout_ms=T]` makes admissions, fences and audit intents durable on N
        replicas before they return (Replication)."""
        check_namespace(namespace)  # before opening a client we would otherwise leak
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
        store = cls(client, namespace, owns_client=True, url=url)
        store.replication = replication
        return store

    def __repr__(self) -> str:
        return f"RedisState(url={self.url!r}, namespace={self.namespace!r})"

    @contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        try:
            yield
        except RedisError as exc:
            raise StoreUnavailable(
                f"state store {self.url} failed to {action}: {type(exc).__name__}: {exc}"
            ) from exc

    def _replicated(self, action: str) -> None:
        """After a write a failover must not lose: wait for the configured replicas to have it."""
        wanted = self.replication.replicas
        if wanted == 0:
            return
        with self._guard(f"wait for replicas to {action}"):
            acknowledged = int(self._client.wait(wanted, self.replication.timeout_ms))
        if acknowledged < wanted:
            raise StoreUnavailable(
                f"state store {self.url}: only {acknowledged} of {wanted} replicas acknowledged the write to "
                f"{action} within {self.replication.timeout_ms} ms; a failover could lose it"
            )

    def now_ms(self) -> int:
        with self._guard("read its clock"):
            seconds, microseconds = self._client.time()
        return int(seconds) * 1000 + int(microseconds) // 1000

    # first-seen times ---------------------------------------------------------------------------

    def load_first_seen(self, partition: str) -> FirstSeenRecords:
        layout = self._read_layout(partition)
        self._layouts[partition] = layout  # what the next save rewrites, if still current then
        return layout.records

    def _read_layout(self, partition: str) -> generations.Layout:
        """The generations and tombstones, read field by field (no reply holds the whole partition),
        between two reads of the version: a save in between makes us read again. If the version is
        still that of our last save, only the tombstones are read."""
        key, gone = self._keys.first_seen(partition), self._keys.first_seen_tombstones(partition)
        version_field = generations.VERSION_FIELD
        kept = self._saved.pop(partition, None)
        with self._guard(f"load first-seen times of {partition!r}"):
            if kept is not None:
                with self._pipeline() as pipe:
                    pipe.hget(key, version_field)
                    pipe.lrange(gone, 0, -1)
                    pipe.hget(key, version_field)
                    version, tombstones, version_after = pipe.execute()
                if version == version_after == kept.version:
                    return generations.reload(partition, kept, tombstones)
            for _ in range(LAYOUT_READS):
                with self._pipeline() as pipe:
                    pipe.hget(key, version_field)
                    pipe.hkeys(key)
                    version, names = pipe.execute()
                    names = [name for name in names if name != version_field]
                    for name in names:
                        pipe.hget(key, name)
                    pipe.lrange(gone, 0, -1)
                    pipe.hget(key, version_field)
                    *values, tombstones, version_after = pipe.execute()
                if version_after == version:
                    found = zip(names, values, strict=True)
                    fields = {name: value for name, value in found if value is not None}
                    return generations.decode(partition, version or "", fields, tombstones)
        raise StoreUnavailable(f"first-seen records of {partition!r} kept changing while read ({self.url})")

    def observed(self) -> dict[str, int]:
        with self._guard("read when partitions were last observed"):
            marks = cast(dict[str, str], self._client.hgetall(self._keys.observed))
        return {partition: int(at_ms) for partition, at_ms in marks.items()}

    def save_first_seen(
        self,
        lease: Lease,
        partition: str,
        upserts: Mapping[str, FirstSeen],
        drops: Iterable[str],
        observed_ms: int,
    ) -> None:
        # Computed from the records as last loaded (or read now), written only if they are still at
        # that version: the generations a save rewrites must be the ones it read.
        keys = self._first_seen_keys(partition)
        dropped = list(drops)
        for _ in range(LAYOUT_READS):
            layout = self._layouts.pop(partition, None) or self._read_layout(partition)
            change = generations.rewrite(layout, upserts, dropped, self.generation_rows)
            version = secrets.token_hex(8)
            args: list[str | int] = [
                lease.token, partition, observed_ms, layout.version, version, layout.tombstones,
                len(change.delete_fields), *change.delete_fields,
                *(item for pair in change.set_fields.items() for item in pair),
            ]  # fmt: skip
            with self._guard(f"save first-seen times of {partition!r}"):
                done = self._save_first_seen(keys=keys, args=args)
            if done == 0:
                raise LeaseLost(self.namespace)
            if done == 1:
                self._saved[partition] = generations.saved(layout, change, version)
                return
        raise StoreUnavailable(f"first-seen records of {partition!r} kept changing while saved ({self.url})")

    def forget_partition(self, lease: Lease, partition: str) -> None:
        self._layouts.pop(partition, None)
        self._saved.pop(partition, None)
        keys = self._first_seen_keys(partition)
        with self._guard(f"forget first-seen times of {partition!r}"):
            done = self._forget_partition(keys=keys, args=[lease.token, partition])
        if not done:
            raise LeaseLost(self.namespace)

    def _first_seen_keys(self, partition: str) -> list[str]:
        """KEYS of the save and forget scripts: lease, generations, observed, tombstones, the old hash."""
        return [
            self._keys.lease,
            self._keys.first_seen(partition),
            self._keys.observed,
            self._keys.first_seen_tombstones(partition),
            self._keys.legacy_first_seen(partition),
        ]

    def _pipeline(self) -> Pipeline:
        return self._client.pipeline(transaction=False)

    # the sweep lease ----------------------------------------------------------------------------

    def acquire_lease(self, holder: str, ttl_ms: int) -> Lease | None:
        token = secrets.token_hex(16)
        value = json.dumps({"token": token, "holder": holder})
        keys = [self._keys.lease, self._keys.admission_barrier]
        with self._guard("acquire the lease"):
            taken, seconds, microseconds = self._acquire_lease(keys=keys, args=[value, ttl_ms])
        if not taken:
            return None
        return Lease(token, holder, int(seconds) * 1000 + int(microseconds) // 1000 + ttl_ms)

    def recheck(self, lease: Lease, ttl_ms: int) -> Recheck:
        keys = [
            self._keys.lease,
            self._keys.fences,
            self._keys.admission_version,
            self._keys.fence_epoch,
            self._keys.deleting,
        ]
        with self._guard("re-check the lease, fences and admissions"):
            renewed, version, epoch, *fences = self._recheck(keys=keys, args=[lease.token, ttl_ms])
        return Recheck(
            lease=Lease(lease.token, lease.holder, int(renewed)) if renewed else None,
            fences={fences[i]: int(float(fences[i + 1])) for i in range(0, len(fences), 2)},
            admissions_version=int(version),
            fence_epoch=int(epoch),
        )

    def release_lease(self, lease: Lease) -> None:
        with self._guard("release the lease"):
            self._release_lease(keys=[self._keys.lease, self._keys.admission_barrier], args=[lease.token])

    def lease_holder(self) -> Lease | None:
        with self._guard("read the lease"):
            found = self._lease_holder(keys=[self._keys.lease])
        if not found:
            return None
        value, expires_at_ms = found
        document = json.loads(value)
        return Lease(document["token"], document["holder"], int(expires_at_ms))

    # run summaries and the audit log ------------------------------------------------------------

    def record_run(self, report: Mapping[str, Any], lease: Lease | None = None) -> bool:
        document = json.dumps(report, default=str)
        args: list[str | int] = ["" if lease is None else lease.token, document, RUNS_KEPT]
        with self._guard("record a run"):
            return bool(self._record_run(keys=[self._keys.lease, self._keys.runs], args=args))

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        with self._guard("read recent runs"):
            documents = self._client.lrange(self._keys.runs, 0, limit - 1)
        return [json.loads(document) for document in documents]

    def source_counts(self) -> dict[str, int]:
        with self._guard("read the reference sources' counts"):
            counts = cast(dict[str, str], self._client.hgetall(self._keys.source_counts))
        return {source: int(count) for source, count in counts.items()}

    def record_source_counts(self, lease: Lease, counts: Mapping[str, int]) -> None:
        args: list[str | int] = [lease.token, *(item for pair in counts.items() for item in pair)]
        with self._guard("record the reference sources' counts"):
            done = self._record_source_counts(keys=[self._keys.lease, self._keys.source_counts], args=args)
        if not done:
            raise LeaseLost(self.namespace)

    def namespaces_in_use(self) -> list[NamespaceSeen]:
        """Every tq-gc namespace on this Redis server, in each database that has keys (INFO keyspace,
        then SCAN), for `tq-gc check`: publishers and sweepers on different namespaces or databases
        each read as the other having no references. A database that refuses SELECT is left out."""
        current = self.database
        with self._guard("list the tq-gc namespaces on this Redis"):
            try:
                keyspace = self._client.info("keyspace")
            except RedisError:
                keyspace = {}  # INFO refused (some managed services): this database alone
            others = sorted({int(name[2:]) for name in keyspace if name[2:].isdigit()} - {current})
            seen = _namespaces_in(self._client, current)
            for database in others:
                client = _client_for(self._client, database)
                try:
                    seen += _namespaces_in(client, database)
                except RedisError:
                    continue  # another database we may not select (ACLs, a cluster): not ours to judge
                finally:
                    client.close()
                    client.connection_pool.disconnect()  # a pool handed in is not closed with its client
        return seen

    @property
    def database(self) -> int:
        """The database number this store's client selects."""
        return int(self._client.connection_pool.connection_kwargs.get("db") or 0)

    def record_intent(self, lease: Lease, batch: AuditBatch, fence_epoch: int, ttl_ms: int) -> str:
        rows = json.dumps(
            {
                "keys": batch.keys,
                "unreferenced_ms": batch.unreferenced_ms,
                "global_indexes": batch.global_indexes,
                "tags_digests": batch.tags_digests,
            }
        )
        keys = [
            self._keys.lease,
            self._keys.audit,
            self._keys.fences,
            self._keys.fence_epoch,
            self._keys.deleting,
        ]
        args: list[str | int] = [
            lease.token, AUDIT_MAXLEN, batch.run_id, batch.partition, len(batch), rows, fence_epoch, ttl_ms,
        ]  # fmt: skip
        with self._guard("record the rows about to be deleted"):
            intent_id = self._record_intent(keys=keys, args=args)
        if intent_id == 0:
            raise LeaseLost(self.namespace)
        if intent_id == -1:
            raise FenceRaised(self.namespace)
        self._replicated("record the rows about to be deleted")
        return str(intent_id)

    def confirm_deletes(
        self, lease: Lease, intent_id: str, batch: AuditBatch, deleted: Collection[str], forget: Iterable[str]
    ) -> None:
        saved = json.dumps([key for key in batch.keys if key not in deleted])
        keys = [
            self._keys.lease,
            self._keys.audit,
            self._keys.first_seen_tombstones(batch.partition),
            self._keys.deleting,
        ]
        tombstone = json.dumps(list(forget), separators=(",", ":"))
        with self._guard("confirm deleted rows"):
            done = self._confirm_deletes(keys=keys, args=[lease.token, intent_id, saved, tombstone])
        if not done:
            raise LeaseLost(self.namespace)

    def read_audit(self, run_id: str | None, limit: int) -> list[DeletedRow]:
        found: list[DeletedRow] = []
        saved_by_intent: dict[str, list[str]] = {}  # confirmations are newer than their intents
        newest = "+"
        with self._guard("read the audit log"):
            while len(found) < limit:
                page = cast(
                    list[tuple[str, dict[str, str]]],
                    self._client.xrevrange(self._keys.audit, max=newest, min="-", count=AUDIT_PAGE),
                )
                for entry_id, fields in page:
                    if "confirms" in fields:
                        saved_by_intent[fields["confirms"]] = json.loads(fields["saved"])
                    elif run_id is None or fields.get("run_id") == run_id:
                        rows = _decode_audit(fields, saved_by_intent.pop(entry_id, None))
                        found.extend(reversed(rows))
                if len(page) < AUDIT_PAGE:
                    break
                newest = "(" + page[-1][0]  # exclusive: continue below the oldest entry seen
        return found[: max(limit, 0)]

    # admissions and fences (expiry computed on the Redis clock, inside the scripts) -------------

    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        keys = [
            self._keys.admission_expiry,
            self._keys.admission_rows,
            self._keys.admission_version,
            self._keys.lease,
            self._keys.admission_barrier,
        ]
        with self._guard(f"record admission {admission_id!r}"):
            self._admit(keys=keys, args=[admission_id, json.dumps(rows), ttl_ms, new_version()])
        self._replicated(f"record admission {admission_id!r}")

    def renew_admission(self, admission_id: str, ttl_ms: int) -> bool:
        with self._guard(f"renew admission {admission_id!r}"):
            renewed = self._renew_admission(keys=[self._keys.admission_expiry], args=[admission_id, ttl_ms])
        return bool(renewed)

    def release_admission(self, admission_id: str) -> None:
        with self._guard(f"release admission {admission_id!r}"), self._client.pipeline() as pipe:
            pipe.zrem(self._keys.admission_expiry, admission_id)
            pipe.hdel(self._keys.admission_rows, admission_id)
            pipe.execute()

    def live_admissions(self) -> dict[str, AdmissionRows]:
        return copied_admissions(self.live_admission_rows())

    def live_admission_rows(self) -> dict[str, AdmissionRows]:
        """A document read last time as well is not decoded again: 10,000 admissions holding 400,000
        keys took ~65 ms to decode, every sweep. The rows are kept by their document, never changed."""
        keys = [self._keys.admission_expiry, self._keys.admission_rows]
        with self._guard("read live admissions"):
            flat = self._live_admissions(keys=keys)
        last, read = self._admissions_read, {}
        for admission_id, document in zip(flat[::2], flat[1::2], strict=True):
            kept = last.get(admission_id)
            read[admission_id] = (
                kept if kept is not None and kept[0] == document else (document, decoded_rows(document))
            )
        self._admissions_read = read
        return {admission_id: rows for admission_id, (_, rows) in read.items()}

    def admitted_since_lease(self, lease: Lease, partition: str, keys: Collection[str]) -> set[str]:
        """Reads only the barrier's documents added since this store last read it for this lease (each
        admission's rows are decoded once per sweep), then answers from its copy."""
        copy = self._barrier.for_lease(lease.token)
        with self._guard("read the admission barrier"):
            answer = self._admitted_since(
                keys=[self._keys.lease, self._keys.admission_barrier], args=[lease.token, copy.read]
            )
        if answer == 0:
            raise LeaseLost(self.namespace)
        copy.take(answer[1])
        held = copy.keys.get(partition)
        return set() if held is None else held.intersection(keys)

    def admissions_version(self) -> int:
        with self._guard("read the admissions version"):
            return int(cast(str | None, self._client.get(self._keys.admission_version)) or 0)

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        with self._guard(f"raise fence {name!r}"):
            self._raise_fence(keys=[self._keys.fences, self._keys.fence_epoch], args=[name, ttl_ms])
        self._replicated(f"raise fence {name!r}")

    def lower_fence(self, name: str) -> None:
        with self._guard(f"lower fence {name!r}"):
            self._client.zrem(self._keys.fences, name)

    def live_fences(self) -> dict[str, int]:
        with self._guard("read live fences"):
            flat = self._live_fences(keys=[self._keys.fences])
        return {flat[i]: int(float(flat[i + 1])) for i in range(0, len(flat), 2)}

    def eviction_policy(self) -> str | None:
        """The server's maxmemory-policy, or None when it will not say (CONFIG disabled, as on some
        managed services). Anything but `noeviction` may drop the lease or admissions under pressure."""
        try:
            found = cast(dict[str, str], self._client.config_get("maxmemory-policy"))
        except RedisError:
            return None
        return found.get("maxmemory-policy")

    def delete_in_flight(self) -> bool:
        with self._guard("read whether a delete is in flight"):
            return bool(self._client.exists(self._keys.deleting))

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


@dataclass(frozen=True, slots=True)
class NamespaceSeen:
    """A tq-gc namespace found on a Redis server: whether an admission was ever recorded there (its
    admissions version, which nothing removes) and whether a sweeper recorded runs there."""

    database: int
    namespace: str
    admitted: bool
    swept: bool


_NAMESPACE_KEY = re.compile(r"^tqgc:\{([^{}]+)\}:(.*)$")


def _namespaces_in(client: redis.Redis, database: int) -> list[NamespaceSeen]:
    suffixes: dict[str, set[str]] = {}
    for key in client.scan_iter(match="tqgc:{*}:*", count=1000):
        found = _NAMESPACE_KEY.match(key)
        if found:
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


def _describe(connection_kwargs: Mapping[str, Any]) -> str:
    """A log-safe address for a client we were handed (no password: we never read it)."""
    if connection_kwargs.get("path"):
        return f"unix://{connection_kwargs['path']}"
    host = connection_kwargs.get("host", "localhost")
    return f"redis://{host}:{connection_kwargs.get('port', 6379)}/{connection_kwargs.get('db', 0)}"


def _decode_audit(fields: Mapping[str, str], saved: list[str] | None) -> list[DeletedRow]:
    """The rows of one intent entry, in the batch's order: those deleted if a confirmation (naming the
    rows `saved`) was found, all of them, unconfirmed, if not."""
    columns = json.loads(fields["rows"])
    batch = AuditBatch(
        run_id=fields["run_id"],
        partition=fields["partition"],
        keys=tuple(columns["keys"]),
        unreferenced_ms=tuple(columns["unreferenced_ms"]),
        global_indexes=tuple(columns["global_indexes"]),
        tags_digests=tuple(columns["tags_digests"]),
    )
    if saved is not None:
        batch = batch.confirm(set(batch.keys).difference(saved))
    return batch.rows()


class BarrierCopy:
    """This store's copy of the admission barrier of one lease: the documents read so far, decoded."""

    def __init__(self, token: str = "") -> None:
        self.token = token
        self.read = 0  # documents taken so far: where the next read starts
        self.keys: dict[str, set[str]] = {}

    def for_lease(self, token: str) -> BarrierCopy:
        """This copy, or a new empty one for another lease (a lease taken starts its barrier afresh)."""
        if token != self.token:
            self.token, self.read, self.keys = token, 0, {}
        return self

    def take(self, documents: list[str]) -> None:
        for document in documents:
            for partition, keys in decoded_rows(document).items():
                self.keys.setdefault(partition, set()).update(keys)
        self.read += len(documents)


def decoded_rows(document: str) -> AdmissionRows:
    """An admission's rows from the JSON document the registry holds."""
    rows: AdmissionRows = json.loads(document)
    return rows
