"""Pure data shared by the planner, the collector and the reports. No I/O here."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, NamedTuple

Tags = Mapping[str, Any]
Listing = Mapping[str, Mapping[str, Tags]]  # partition -> key -> tags: what a sweep listed
NO_TAGS: Tags = {}
RowsByPartition = Mapping[str, list[str]]


class RowId(NamedTuple):
    """A row's address. A tuple, not a dataclass: sweeps hash millions of these."""

    partition: str
    key: str

    def __str__(self) -> str:
        return f"{self.partition}/{self.key}"


def tags_digest(tags: Tags | None) -> str:
    """A digest of a row's tags, stored with its first sighting and compared before the delete.

    A CRC-32 of the repr as TQ returns the tags: a sweep digests every row it deletes, and this is four
    times cheaper than canonical JSON and a cryptographic hash. It only has to tell a row from a
    rewritten one, alongside the global index (a collision needs the same index as well). Should TQ
    return the same tags in another order, the digest changes and the row counts as rewritten: its
    clock restarts, the safe side.
    """
    return format(zlib.crc32(repr(tags).encode()), "08x") if tags else "00000000"


class ListedKeys(Mapping[str, Tags]):
    """A partition listed without its rows' tags: {key: global index}, seen as {key: no tags}.

    What a partition that is only swept needs: a row's identity is pinned when it is first seen (the
    tags then read with it), and compared before its delete; the listing itself only names the keys.
    Reading tags too would cost the controller a request per window that copies every row's tags."""

    def __init__(self, indexes: dict[str, int]) -> None:
        self.indexes = indexes

    def __getitem__(self, key: str) -> Tags:
        if key not in self.indexes:
            raise KeyError(key)
        return NO_TAGS

    def __contains__(self, key: object) -> bool:
        return key in self.indexes

    def __iter__(self) -> Iterator[str]:
        return iter(self.indexes)

    def __len__(self) -> int:
        return len(self.indexes)


class Identity(NamedTuple):
    """What makes a row the same row: TQ recycles global indexes and keys can be recreated.

    A tuple, not a frozen dataclass: a sweep loads one per first-seen record, and tuples build faster."""

    tags_digest: str
    global_index: int | None = None

    def matches(self, other: Identity) -> bool:
        if self.tags_digest != other.tags_digest:
            return False
        if self.global_index is None or other.global_index is None:
            return True
        return self.global_index == other.global_index


class IdentityColumns(Mapping[str, Identity]):
    """{key: Identity} held as {key: tags digest} and {key: global index}: a delete batch's expected
    identities without a tuple per row (2,000 Identity tuples took 1.5-1.9 ms a batch to build, ~0.5 s
    of a 1M-row sweep; identity_columns() reads the columns as they are)."""

    __slots__ = ("digests", "indexes")

    def __init__(self, digests: dict[str, str], indexes: dict[str, int | None]) -> None:
        if digests.keys() != indexes.keys():
            raise ValueError("identity columns of different keys")
        self.digests = digests
        self.indexes = indexes

    def __getitem__(self, key: str) -> Identity:
        return Identity(self.digests[key], self.indexes[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.digests)

    def __len__(self) -> int:
        return len(self.digests)


def identity_columns(
    identities: Mapping[str, Identity], keys: Iterable[str]
) -> tuple[list[str], list[int | None]]:
    """([tags digest], [global index]) of `keys`, in their order, from any {key: Identity}."""
    if isinstance(identities, IdentityColumns):
        ordered = list(keys)
        digests, indexes = identities.digests, identities.indexes
        return list(map(digests.__getitem__, ordered)), list(map(indexes.__getitem__, ordered))
    chosen = [identities[key] for key in keys]
    return [identity.tags_digest for identity in chosen], [identity.global_index for identity in chosen]


class FirstSeen(NamedTuple):
    """When the collector first saw a row unreferenced (store clock, ms), and the row's identity then."""

    at_ms: int
    identity: Identity


class Source(StrEnum):
    ADMISSIONS = "admissions"
    MANIFESTS = "manifests"
    TAGS = "tags"
    OWNERS = "owners"


KeysByPartition = Mapping[str, frozenset[str]]


def group_by_partition(rows: Iterable[RowId]) -> dict[str, frozenset[str]]:
    """{partition: keys} of a collection of rows."""
    grouped: dict[str, set[str]] = {}
    for partition, key in rows:
        grouped.setdefault(partition, set()).add(key)
    return {partition: frozenset(keys) for partition, keys in grouped.items()}


def merge_keys(*sources: KeysByPartition) -> dict[str, frozenset[str]]:
    """{partition: keys} held by any of `sources`."""
    merged: dict[str, frozenset[str]] = {}
    for source in sources:
        for partition, keys in source.items():
            merged[partition] = merged.get(partition, frozenset()) | keys
    return merged


def rows_of(keys_by_partition: KeysByPartition) -> set[RowId]:
    return {RowId(partition, key) for partition, keys in keys_by_partition.items() for key in keys}


@dataclass(frozen=True, slots=True)
class References:
    """Every reference the sweep read: each source read completely, some more than once (see
    sweep.observe.Observer.read for the order that keeps a moving reference in view).

    Each source's rows are kept as {partition: keys}: the planner and the per-batch re-check work one
    partition at a time, and the admissions arrive grouped that way, so no sweep regroups 100k rows."""

    admissions: KeysByPartition = field(default_factory=dict)
    manifests: KeysByPartition = field(default_factory=dict)
    tags: KeysByPartition = field(default_factory=dict)
    owners: KeysByPartition = field(default_factory=dict)

    @classmethod
    def from_rows(
        cls,
        admissions: Iterable[RowId] = (),
        manifests: Iterable[RowId] = (),
        tags: Iterable[RowId] = (),
        owners: Iterable[RowId] = (),
    ) -> References:
        return cls(
            group_by_partition(admissions),
            group_by_partition(manifests),
            group_by_partition(tags),
            group_by_partition(owners),
        )

    def held(self, source: Source, partition: str) -> frozenset[str]:
        """The keys `source` references in `partition`."""
        by_partition: KeysByPartition = getattr(self, source.value)
        return by_partition.get(partition, frozenset())

    def rows(self) -> set[RowId]:
        """Every referenced row, whatever its source."""
        return rows_of(self.admissions) | rows_of(self.manifests) | rows_of(self.tags) | rows_of(self.owners)


class Decision(StrEnum):
    """The bucket each in-scope row lands in. Exactly one per row."""

    DELETE = "delete"
    KEEP_ADMISSION = "keep_admission"
    KEEP_MANIFEST = "keep_manifest"
    KEEP_TAG = "keep_tag"
    KEEP_OWNER = "keep_owner"
    KEEP_GRACE = "keep_grace"
    KEEP_OVER_CAP = "keep_over_cap"


KEEP_BY_SOURCE = {
    Source.ADMISSIONS: Decision.KEEP_ADMISSION,
    Source.MANIFESTS: Decision.KEEP_MANIFEST,
    Source.TAGS: Decision.KEEP_TAG,
    Source.OWNERS: Decision.KEEP_OWNER,
}


class Outcome(StrEnum):
    COMPLETED = "completed"
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"
    ABORTED = "aborted"


class Cause(StrEnum):
    """Why a sweep ended skipped or aborted: what metrics, alerts and the CLI branch on, not the wording.

    A sweep that stops may have deleted rows before it stopped: `counts.deleted` says how many."""

    LEASE_HELD = "lease_held"  # skipped: another sweeper holds the lease
    FENCE_UP = "fence_up"  # skipped: a checkpoint fence is up
    FENCE_RAISED = "fence_raised"  # skipped: a fence came (and maybe went) since the references were read
    CHECKPOINT_IN_PROGRESS = "checkpoint_in_progress"  # skipped: a checkpoint is being written
    LEASE_LOST = "lease_lost"  # aborted: our lease expired or was taken; we wrote nothing more
    SOURCE_FAILED = "source_failed"  # aborted: a reference source could not be read completely
    STORE_FAILED = "store_failed"  # aborted: the state store or the row store failed
    BLAST_RADIUS = "blast_radius"  # aborted: more rows eligible than max_delete_fraction allows
    STOPPED = "stopped"  # aborted: the sweeper was asked to stop (sidecar shutdown) before its next request
    ERROR = "error"  # aborted: an unexpected exception; the reason names its type


class DeletedRow(NamedTuple):
    """One deleted row, as the audit log reads back (AuditBatch.rows)."""

    partition: str
    key: str
    unreferenced_seconds: float
    global_index: int | None = None
    tags_digest: str = ""
    run_id: str = ""
    # False: the delete was intended and may have happened, but its sweeper never confirmed it (it
    # crashed, lost its lease or its store failed between the intent and the confirmation).
    confirmed: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "key": self.key,
            "unreferenced_s": round(self.unreferenced_seconds, 3),
            "global_index": self.global_index,
            "tags_digest": self.tags_digest,
            "run_id": self.run_id,
            "confirmed": self.confirmed,
        }


@dataclass(frozen=True, slots=True)
class AuditBatch:
    """The rows one delete batch removes, column by column, all of one run and one partition.

    Written ahead: the batch is recorded as an intent before the clear (confirmed=False), then confirmed
    with the rows actually deleted. The audit log keeps one entry per batch, not per row: a sweep
    deleting 50k rows writes 25 entries."""

    run_id: str
    partition: str
    keys: tuple[str, ...]
    unreferenced_ms: tuple[int, ...]
    global_indexes: tuple[int | None, ...]
    tags_digests: tuple[str, ...]
    confirmed: bool = False

    def __post_init__(self) -> None:
        lengths = {len(self.unreferenced_ms), len(self.global_indexes), len(self.tags_digests)}
        if lengths != {len(self.keys)}:
            raise ValueError(f"audit batch columns differ in length: {len(self.keys)} keys, {lengths}")

    def __len__(self) -> int:
        return len(self.keys)

    def rows(self) -> list[DeletedRow]:
        """One DeletedRow per key, in the batch's order."""
        columns = zip(self.keys, self.unreferenced_ms, self.global_indexes, self.tags_digests, strict=True)
        return [
            DeletedRow(self.partition, key, ms / 1000, index, digest, self.run_id, self.confirmed)
            for key, ms, index, digest in columns
        ]

    def confirm(self, deleted: Iterable[str]) -> AuditBatch:
        """The batch as confirmed: only the rows of `deleted`, in batch order."""
        gone = set(deleted)
        if gone.issuperset(self.keys):  # the usual case: every row of the batch went
            return replace(self, confirmed=True)
        keep = [i for i, key in enumerate(self.keys) if key in gone]
        return AuditBatch(
            run_id=self.run_id,
            partition=self.partition,
            keys=tuple(self.keys[i] for i in keep),
            unreferenced_ms=tuple(self.unreferenced_ms[i] for i in keep),
            global_indexes=tuple(self.global_indexes[i] for i in keep),
            tags_digests=tuple(self.tags_digests[i] for i in keep),
            confirmed=True,
        )


@dataclass(slots=True)
class Counts:
    listed: int = 0
    in_scope: int = 0
    referenced: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Source})
    within_grace: int = 0
    eligible: int = 0
    over_cap: int = 0
    deleted: int = 0
    recheck_saved: int = 0
    failed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "in_scope": self.in_scope,
            "referenced": dict(self.referenced),
            "within_grace": self.within_grace,
            "eligible": self.eligible,
            "over_cap": self.over_cap,
            "deleted": self.deleted,
            "recheck_saved": self.recheck_saved,
            "failed": self.failed,
        }


PHASES = ("lease", "attach", "list", "references", "plan", "delete")
DELETED_SAMPLE_SIZE = 20


class LongestRequest(NamedTuple):
    """The longest single request tq-gc made to TransferQueue in a sweep: the longest it held up the job's
    controller (which serves one request at a time) in one go, as tq-gc's client saw it."""

    op: str
    ms: float


@dataclass(slots=True)
class SweepReport:
    run_id: str
    namespace: str
    dry_run: bool
    # Aborted until the sweep says otherwise: a sweep that dies in a way nobody foresaw must not
    # read as completed.
    outcome: Outcome = Outcome.ABORTED
    reason: str | None = None
    cause: Cause | None = None
    started_at: str = ""
    finished_at: str = ""
    counts: Counts = field(default_factory=Counts)
    phases_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    deleted_sample: list[DeletedRow] = field(default_factory=list)
    longest_tq_request: LongestRequest | None = None
    # Every TQ request of the sweep, {operation: [seconds]}, for tqgc_tq_request_seconds; not serialized.
    tq_request_seconds: dict[str, list[float]] = field(default_factory=dict)

    def record_tq_requests(self, seconds_by_op: Mapping[str, list[float]]) -> None:
        """Keep the sweep's TQ requests, and the longest of them."""
        self.tq_request_seconds = {op: list(seconds) for op, seconds in seconds_by_op.items() if seconds}
        longest = max(((max(seconds), op) for op, seconds in self.tq_request_seconds.items()), default=None)
        self.longest_tq_request = None if longest is None else LongestRequest(longest[1], longest[0] * 1000)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "namespace": self.namespace,
            "dry_run": self.dry_run,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "cause": self.cause.value if self.cause else None,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "counts": self.counts.to_dict(),
            "phases_ms": {k: round(v, 3) for k, v in self.phases_ms.items()},
            "deleted_sample": [
                {"partition": d.partition, "key": d.key, "unreferenced_s": round(d.unreferenced_seconds, 3)}
                for d in self.deleted_sample
            ],
            "longest_tq_request": (
                None
                if self.longest_tq_request is None
                else {"op": self.longest_tq_request.op, "ms": round(self.longest_tq_request.ms, 3)}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepReport:
        counts = Counts(**{k: v for k, v in data.get("counts", {}).items() if k in Counts.__slots__})
        return cls(
            run_id=data["run_id"],
            namespace=data["namespace"],
            dry_run=data["dry_run"],
            outcome=Outcome(data["outcome"]),
            reason=data.get("reason"),
            cause=Cause(data["cause"]) if data.get("cause") else None,
            started_at=data.get("started_at", ""),
            finished_at=data.get("finished_at", ""),
            counts=counts,
            phases_ms=dict(data.get("phases_ms", {})),
            deleted_sample=[DeletedRow(**d) for d in data.get("deleted_sample", [])],
            longest_tq_request=_longest_request(data.get("longest_tq_request")),
        )


def _longest_request(data: Mapping[str, Any] | None) -> LongestRequest | None:
    return None if not data else LongestRequest(str(data["op"]), float(data["ms"]))
