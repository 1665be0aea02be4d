"""The shared state store (`redis://`, `rediss://`, `unix://`), used by the sidecar, the CronJob and the CLI.

Every time is read from Redis (`TIME`, or `redis.call('TIME')` inside a script), never from this host:
expiries of admissions and fences are computed inside Lua scripts, so a publisher's host clock and the
collector's host clock never enter the comparison. Key schema and caps: tq_gc/state/keys.py.

RedisState holds the sweep lease and the fences itself, and hands the rest to one part per concept: the
connection and its replication (redis_connection.py), the first-seen records (redis_first_seen.py), the
audit log and run summaries (redis_audit.py), the admissions (redis_admissions.py, redis_barrier.py) and
the namespaces on the server (redis_namespaces.py).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Iterable, Mapping
from typing import Any, cast

import redis
from redis.exceptions import RedisError

from tq_gc.audit import AuditBatch, DeletedRow
from tq_gc.first_seen import FirstSeen, FirstSeenRecords
from tq_gc.redaction import redact_url
from tq_gc.state import redis_scripts as scripts
from tq_gc.state.base import AdmissionRows, Lease, Recheck, copied_admissions
from tq_gc.state.keys import GENERATION_ROWS, STORE_ID_KEY, Keys, check_namespace
from tq_gc.state.redis_admissions import RedisAdmissions
from tq_gc.state.redis_audit import RedisAudit
from tq_gc.state.redis_connection import RedisConnection, client_from_url, describe
from tq_gc.state.redis_first_seen import RedisFirstSeen
from tq_gc.state.redis_namespaces import NamespaceSeen, namespaces_in_use
from tq_gc.state.url import Replication


class RedisState:
    def __init__(
        self, client: redis.Redis, namespace: str, owns_client: bool, *, url: str | None = None
    ) -> None:
        kwargs = client.connection_pool.connection_kwargs
        if not kwargs.get("decode_responses"):
            raise ValueError("RedisState needs a client made with decode_responses=True")
        self.namespace = check_namespace(namespace)
        self._connection = RedisConnection(client, redact_url(url) if url is not None else describe(kwargs))
        self._client = client
        self._owns_client = owns_client
        self._keys = Keys(namespace)
        self.generation_rows = GENERATION_ROWS  # rows a generation field holds (tests make it small)
        self._first_seen = RedisFirstSeen(self._connection, self._keys, self.namespace)
        self._audit = RedisAudit(self._connection, self._keys, self.namespace)
        self._admissions = RedisAdmissions(self._connection, self._keys, self.namespace)
        register = client.register_script
        self._recheck = register(scripts.RECHECK)
        self._raise_fence = register(scripts.RAISE_FENCE)
        self._live_fences = register(scripts.LIVE_FENCES)
        self._release_lease = register(scripts.RELEASE_LEASE)
        self._lease_holder = register(scripts.LEASE_HOLDER)
        self._acquire_lease = register(scripts.ACQUIRE_LEASE)
        self._store_id = register(scripts.STORE_ID)

    @classmethod
    def from_url(cls, url: str, namespace: str) -> RedisState:
        """A store with its own client; close() closes it. No retries inside: a failure ends the sweep.
        `?wait_replicas=N` makes admissions, fences and audit intents durable on N
        replicas before they return (Replication)."""
        check_namespace(namespace)  # before opening a client we would otherwise leak
        client, replication = client_from_url(url)
        store = cls(client, namespace, owns_client=True, url=url)
        store.replication = replication
        return store

    @property
    def url(self) -> str:
        """The store's address, safe to log (no password)."""
        return self._connection.url

    @property
    def replication(self) -> Replication:
        return self._connection.replication

    @replication.setter
    def replication(self, replication: Replication) -> None:
        self._connection.replication = replication

    def __repr__(self) -> str:
        return f"RedisState(url={self.url!r}, namespace={self.namespace!r})"

    def store_id(self) -> str:
        """Which store this is: a random id written into the database the first time anyone asks, and
        read back by everyone after, whatever URL (host name, port spelling, `?db=`) reached it. A Redis
        restarted empty, or another database, has another."""
        with self._connection.guard("read the store's id"):
            return str(self._store_id(keys=[STORE_ID_KEY], args=[f"redis-{secrets.token_hex(16)}"]))

    def now_ms(self) -> int:
        with self._connection.guard("read its clock"):
            seconds, microseconds = self._client.time()
        return int(seconds) * 1000 + int(microseconds) // 1000

    # first-seen times ---------------------------------------------------------------------------

    def load_first_seen(self, partition: str) -> FirstSeenRecords:
        return self._first_seen.load(partition)

    def observed(self) -> dict[str, int]:
        return self._first_seen.observed()

    def save_first_seen(
        self,
        lease: Lease,
        partition: str,
        upserts: Mapping[str, FirstSeen],
        drops: Iterable[str],
        observed_ms: int,
    ) -> None:
        self._first_seen.save(lease, partition, upserts, drops, observed_ms, self.generation_rows)

    def forget_partition(self, lease: Lease, partition: str) -> None:
        self._first_seen.forget(lease, partition)

    # the sweep lease ----------------------------------------------------------------------------

    def acquire_lease(self, holder: str, ttl_ms: int) -> Lease | None:
        token = secrets.token_hex(16)
        value = json.dumps({"token": token, "holder": holder})
        keys = [self._keys.lease, self._keys.admission_barrier]
        with self._connection.guard("acquire the lease"):
            taken, seconds, microseconds = self._acquire_lease(keys=keys, args=[value, ttl_ms, token])
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
        with self._connection.guard("re-check the lease, fences and admissions"):
            renewed, version, epoch, *fences = self._recheck(keys=keys, args=[lease.token, ttl_ms])
        return Recheck(
            lease=Lease(lease.token, lease.holder, int(renewed)) if renewed else None,
            fences={fences[i]: int(float(fences[i + 1])) for i in range(0, len(fences), 2)},
            admissions_version=int(version),
            fence_epoch=int(epoch),
            server_run=self.server_run(),
        )

    def server_run(self) -> str:
        """The run id of the Redis server process answering (INFO server), read after a re-check: it
        changes when the server restarts, even with its data (an append-only file), and at a failover to
        a replica. "" when INFO is refused (some managed services): then only a failed call tells."""
        with self._connection.guard("read the server's run id"):
            try:
                info = self._client.info("server")
            except redis.ResponseError:  # INFO disabled or renamed
                return ""
        return str(info.get("run_id", ""))

    def release_lease(self, lease: Lease) -> None:
        with self._connection.guard("release the lease"):
            self._release_lease(keys=[self._keys.lease, self._keys.admission_barrier], args=[lease.token])

    def lease_holder(self) -> Lease | None:
        with self._connection.guard("read the lease"):
            found = self._lease_holder(keys=[self._keys.lease])
        if not found:
            return None
        value, expires_at_ms = found
        document = json.loads(value)
        return Lease(document["token"], document["holder"], int(expires_at_ms))

    # run summaries and the audit log ------------------------------------------------------------

    def record_run(self, report: Mapping[str, Any], lease: Lease | None = None) -> bool:
        return self._audit.record_run(report, lease)

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        return self._audit.recent_runs(limit)

    def source_counts(self) -> dict[str, int]:
        return self._audit.source_counts()

    def source_baseline_since_ms(self) -> int | None:
        return self._audit.source_baseline_since_ms()

    def record_source_counts(self, lease: Lease, counts: Mapping[str, int]) -> None:
        self._audit.record_source_counts(lease, counts)

    def record_intent(self, lease: Lease, batch: AuditBatch, fence_epoch: int, ttl_ms: int) -> str:
        return self._audit.record_intent(lease, batch, fence_epoch, ttl_ms)

    def confirm_deletes(
        self, lease: Lease, intent_id: str, batch: AuditBatch, deleted: Collection[str], forget: Iterable[str]
    ) -> None:
        self._audit.confirm_deletes(lease, intent_id, batch, deleted, forget)

    def read_audit(self, run_id: str | None, limit: int) -> list[DeletedRow]:
        return self._audit.read_audit(run_id, limit)

    # the server and its namespaces --------------------------------------------------------------

    def namespaces_in_use(self) -> list[NamespaceSeen]:
        """Every tq-gc namespace on this Redis server, in each database that has keys (INFO keyspace,
        then SCAN), for `tq-gc check`: publishers and sweepers on different namespaces or databases
        each read as the other having no references. A database that refuses SELECT is left out."""
        current = self.database
        with self._connection.guard("list the tq-gc namespaces on this Redis"):
            return namespaces_in_use(self._client, current)

    @property
    def database(self) -> int:
        """The database number this store's client selects."""
        return int(self._client.connection_pool.connection_kwargs.get("db") or 0)

    def eviction_policy(self) -> str | None:
        """The server's maxmemory-policy, or None when it will not say (CONFIG disabled, as on some
        managed services). Anything but `noeviction` may drop the lease or admissions under pressure."""
        try:
            found = cast(dict[str, str], self._client.config_get("maxmemory-policy"))
        except RedisError:
            return None
        return found.get("maxmemory-policy")

    # admissions and fences (expiry computed on the Redis clock, inside the scripts) -------------

    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        self._admissions.admit(admission_id, rows, ttl_ms)

    def renew_admission(self, admission_id: str, ttl_ms: int) -> bool:
        return self._admissions.renew(admission_id, ttl_ms)

    def release_admission(self, admission_id: str) -> None:
        self._admissions.release(admission_id)

    def admission_expiries(self) -> dict[str, int]:
        return self._admissions.expiries(self.now_ms())

    def live_admissions(self) -> dict[str, AdmissionRows]:
        return copied_admissions(self.live_admission_rows())

    def live_admission_rows(self) -> dict[str, AdmissionRows]:
        return self._admissions.live_rows()

    def admitted_since_lease(self, lease: Lease, partition: str, keys: Collection[str]) -> set[str]:
        return self._admissions.admitted_since_lease(lease, partition, keys)

    def admissions_version(self) -> int:
        return self._admissions.version()

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        with self._connection.guard(f"raise fence {name!r}"):
            self._raise_fence(keys=[self._keys.fences, self._keys.fence_epoch], args=[name, ttl_ms])
        self._connection.replicated(f"raise fence {name!r}")

    def lower_fence(self, name: str) -> None:
        with self._connection.guard(f"lower fence {name!r}"):
            self._client.zrem(self._keys.fences, name)

    def live_fences(self) -> dict[str, int]:
        with self._connection.guard("read live fences"):
            flat = self._live_fences(keys=[self._keys.fences])
        return {flat[i]: int(float(flat[i + 1])) for i in range(0, len(flat), 2)}

    def delete_in_flight(self) -> bool:
        with self._connection.guard("read whether a delete is in flight"):
            return bool(self._client.exists(self._keys.deleting))

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
