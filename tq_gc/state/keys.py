"""The whole Redis key schema of the state store, and why each cap and TTL is what it is.

Every key is `tqgc:{<namespace>}:...`. The braces are a Redis Cluster hash tag: all keys of one namespace
hash to one slot, so the multi-key Lua scripts and MULTI blocks below stay legal on a cluster, and two
jobs sharing one Redis never touch each other's keys.

    tqgc:{ns}:lease                 STRING  JSON {token, holder}; expires by PX = the lease TTL
    tqgc:{ns}:sightings:<part>      HASH    first-seen records as generations (tq_gc/state/generations.py)
    tqgc:{ns}:sightings:<part>:gone LIST    tombstones: keys of confirmed deletes, until the next save
    tqgc:{ns}:first_seen:<part>     HASH    the earlier layout, a field a row: removed by the partition's
                                            next save or forget (its rows start their grace again)
    tqgc:{ns}:observed              HASH    partition -> at_ms of the last sweep that observed it
    tqgc:{ns}:runs                  LIST    run summaries (JSON), newest first, capped at RUNS_KEPT
    tqgc:{ns}:audit                 STREAM  an intent entry per delete batch (audit.AuditBatch), written
                                            before the clear, and a confirmation entry after; capped by rows
    tqgc:{ns}:admissions:expiry     ZSET    admission_id -> expires_at_ms (store clock)
    tqgc:{ns}:admissions:rows       HASH    admission_id -> JSON {partition: [keys]}
    tqgc:{ns}:admissions:version    STRING  a random token, new on every admit (admissions_version)
    tqgc:{ns}:admissions:barrier    LIST    a head "<lease token> <count>", then the rows document of every
                                            admit made while a sweeper holds the lease, in order; started
                                            afresh when a lease is taken, deleted when it is given back; a
                                            head that is missing or miscounts ends the sweep's deletes
                                            (see StateStore.admitted_since_lease)
    tqgc:{ns}:fences                ZSET    fence name -> expires_at_ms (store clock)
    tqgc:{ns}:fences:epoch          STRING  counter, INCR on every raise_fence (see state.base.Recheck)
    tqgc:{ns}:deleting              STRING  the lease token of a sweeper between its intent and its
                                            confirmation (a delete batch in flight); PX = the lease TTL
    tqgc:{ns}:source_counts         HASH    reference source id -> references it yielded at the last
                                            sweep that read every source (references/emptied.py)

The memory store keeps the same caps, so both backends pass one contract suite.
"""

from __future__ import annotations

import re

# `status` shows the last few runs; 200 covers more than three hours of sweeps at the default 60 s
# interval, enough to see a pattern after an incident, while the list stays a few hundred KB.
RUNS_KEPT = 200

# `tq-gc check` tries a publisher's writes (admit, release, fence, unfence) in a namespace of its own:
# an admission in the job's would mark it "admissions recorded" for good (its admissions version), hiding
# the very misconfiguration the namespace check looks for. Namespace listings leave it out.
CHECK_PROBE_NAMESPACE = "tq-gc-check"

# Rows the audit log keeps, about 80 bytes each: ~8 MB of Redis memory. It equals the default
# max_deletes_per_run, so the newest full run is always still there when someone asks "what did it
# delete?". Whole batches are trimmed, oldest first, only while the newer ones still hold this many
# rows: the log may keep up to one batch more, never fewer.
AUDIT_MAXLEN = 100_000

# Rows in one generation field (~50 bytes each as JSON): reading or writing one field holds Redis
# (single-threaded) for a few ms at most, and a million rows are a few dozen fields.
GENERATION_ROWS = 50_000

# XREVRANGE page size, in batches (up to the store's batch, 2,000 rows, each), when reading the audit log.
AUDIT_PAGE = 16

# Braces would break the hash tag; `:` is fine (config allows `job:42`).
_NAMESPACE = re.compile(r"^[^{}\s]+$")


def check_namespace(namespace: str) -> str:
    if not _NAMESPACE.match(namespace):
        raise ValueError(
            f"namespace {namespace!r} must be non-empty, without braces or whitespace "
            "(it becomes a Redis Cluster hash tag)"
        )
    return namespace


# Which store this is, whatever URL reaches it: a random id written once (SET NX) into the database.
STORE_ID_KEY = "tqgc:store_id"


class Keys:
    """Every key of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.prefix = f"tqgc:{{{check_namespace(namespace)}}}"
        self.lease = f"{self.prefix}:lease"
        self.runs = f"{self.prefix}:runs"
        self.audit = f"{self.prefix}:audit"
        self.admission_expiry = f"{self.prefix}:admissions:expiry"
        self.admission_rows = f"{self.prefix}:admissions:rows"
        self.admission_version = f"{self.prefix}:admissions:version"
        self.admission_barrier = f"{self.prefix}:admissions:barrier"
        self.fences = f"{self.prefix}:fences"
        self.fence_epoch = f"{self.prefix}:fences:epoch"
        self.observed = f"{self.prefix}:observed"
        self.deleting = f"{self.prefix}:deleting"
        self.source_counts = f"{self.prefix}:source_counts"
        self.source_counts_since = f"{self.prefix}:source_counts:since"

    # The first-seen records' keys say "sightings": stored names, kept as they were written.
    def first_seen(self, partition: str) -> str:
        return f"{self.prefix}:sightings:{partition}"

    def first_seen_tombstones(self, partition: str) -> str:
        return f"{self.prefix}:sightings:{partition}:gone"

    def legacy_first_seen(self, partition: str) -> str:
        return f"{self.prefix}:first_seen:{partition}"
