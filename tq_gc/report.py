"""The sweep report: how a sweep ended and why, what it counted, how long each phase took. Its JSON
(to_dict) is a documented contract: the CLI's --json, the runs in the state store, the metrics."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from tq_gc.audit import DeletedRow
from tq_gc.decisions import KEEP_BY_SOURCE, Decision
from tq_gc.footprint import Bytes, StorageFill
from tq_gc.listings import HowListed
from tq_gc.referenced import Source

# The field of the counts that holds each keep reason but a source's (Counts.referenced, by source).
COUNTED_AS: Mapping[Decision, str] = {
    Decision.KEEP_GRACE: "within_grace",
    Decision.KEEP_OVER_CAP: "over_cap",
    Decision.KEEP_RECHECK: "recheck_saved",
}
log = logging.getLogger(__name__)
_SOURCE_OF = {decision: source for source, decision in KEEP_BY_SOURCE.items()}


class Outcome(StrEnum):
    COMPLETED = "completed"
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"
    ABORTED = "aborted"


class Cause(StrEnum):
    """Why a sweep ended skipped or aborted: what metrics, alerts and the CLI branch on, not the wording.

    A sweep that stops may have deleted rows before it stopped: `counts.deleted` says how many."""

    LEASE_HELD = "lease_held"  # skipped: another sweeper holds the lease
    TQ_CLAIMED = "tq_claimed"  # skipped: a sweeper of another state store claims the TransferQueue
    FENCE_UP = "fence_up"  # skipped: a checkpoint fence is up
    FENCE_RAISED = "fence_raised"  # skipped: a fence came (and maybe went) since the references were read
    CHECKPOINT_IN_PROGRESS = "checkpoint_in_progress"  # skipped: a checkpoint is being written
    BASELINE_REBUILDING = "baseline_rebuilding"  # skipped: a source reads as empty, the store's record is new
    LEASE_LOST = "lease_lost"  # aborted: our lease expired or was taken; we wrote nothing more
    SOURCE_FAILED = "source_failed"  # aborted: a reference source could not be read completely
    STORE_FAILED = "store_failed"  # aborted: the state store or the row store failed
    BLAST_RADIUS = "blast_radius"  # aborted: more rows eligible than max_delete_fraction allows
    STOPPED = "stopped"  # aborted: the sweeper was asked to stop (sidecar shutdown) before its next request
    ERROR = "error"  # aborted: an unexpected exception; the reason names its type


@dataclass(slots=True)
class Counts:
    """A sweep's rows, by what became of them. The field names are the report's JSON (a contract)."""

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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counts:
        return cls(**{k: v for k, v in data.items() if k in cls.__slots__})

    def kept(self) -> dict[Decision, int]:
        """The rows kept, by reason."""
        kept = {decision: self.referenced.get(source.value, 0) for source, decision in KEEP_BY_SOURCE.items()}
        kept.update((decision, getattr(self, name)) for decision, name in COUNTED_AS.items())
        return kept

    def set_kept(self, decision: Decision, rows: int) -> None:
        """Count `rows` as kept for `decision` (a keep)."""
        source = _SOURCE_OF.get(decision)
        if source is None:
            setattr(self, COUNTED_AS[decision], rows)
        else:
            self.referenced[source.value] = rows


PHASES = ("lease", "attach", "list", "references", "plan", "delete")
DELETED_SAMPLE_SIZE = 20


class WarningKind(StrEnum):
    """What a sweep warns of: something it did not do as asked, or cannot do as configured, without
    failing. The label of tqgc_sweep_warnings_total{kind}; the report's `warnings` say it in words."""

    MAX_DELETES_CLAMPED = "max_deletes_clamped"  # --max-deletes above limits.max_deletes_per_run
    SCOPE_PARTITION_MISSING = "scope_partition_missing"  # a scope partition the row store does not have
    SWEEP_GAP_OVER_GRACE = "sweep_gap_over_grace"  # sweeps further apart than the grace: clocks restart
    STORAGE_PRESSURE = "storage_pressure"  # storage headroom below pressure.headroom_below


class SweepWarning(NamedTuple):
    kind: WarningKind
    message: str


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
    # Deleted rows (a dry run: rows it would delete), the first DELETED_SAMPLE_SIZE unless asked for all.
    deleted_sample: list[DeletedRow] = field(default_factory=list)
    warnings: list[SweepWarning] = field(default_factory=list)
    longest_tq_request: LongestRequest | None = None
    # The row store instance the sweep attached to (RowStore.identity_space: a TQ controller's), if it
    # says: the next sweep, in this process or another, tells from it that the job replaced its TQ.
    row_store_identity: str | None = None
    # The in-scope rows' bytes by what became of them, beside `counts` (footprint.py).
    bytes: Bytes = field(default_factory=Bytes)
    # How full the row store's storage was at the sweep's end (None: not read, or no bounded storage).
    storage: StorageFill | None = None
    # Every TQ request of the sweep, {operation: [seconds]}, for tqgc_tq_request_seconds; not serialized.
    tq_request_seconds: dict[str, list[float]] = field(default_factory=dict)
    # What the row store's pacing waited for between its requests, {wait: ms} (RowStore.take_pacing_stats:
    # TQ's quiet_wait and duty_pause): the sweep's time that held nothing up.
    pacing_ms: dict[str, float] = field(default_factory=dict)

    # How the row store listed each partition (RowStore.take_listings: by the change journal, or in full
    # and why), {partition: how}; {} for a store that does not say.
    listings: dict[str, HowListed] = field(default_factory=dict)

    def record_listings(self, listed: Mapping[str, HowListed]) -> None:
        self.listings = dict(sorted(listed.items()))

    def record_pacing(self, seconds_by_wait: Mapping[str, float]) -> None:
        self.pacing_ms = {wait: seconds * 1000 for wait, seconds in seconds_by_wait.items()}

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
            "warnings": [{"kind": w.kind.value, "message": w.message} for w in self.warnings],
            "longest_tq_request": (
                None
                if self.longest_tq_request is None
                else {"op": self.longest_tq_request.op, "ms": round(self.longest_tq_request.ms, 3)}
            ),
            "row_store_identity": self.row_store_identity,
            "bytes": self.bytes.to_dict(),
            "storage": None if self.storage is None else self.storage.to_dict(),
            "pacing_ms": {wait: round(ms, 3) for wait, ms in self.pacing_ms.items()},
            "listings": {partition: how.to_dict() for partition, how in self.listings.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepReport:
        counts = Counts.from_dict(data.get("counts", {}))
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
            deleted_sample=[_sampled_row(row) for row in data.get("deleted_sample", [])],
            warnings=[_warning(w) for w in data.get("warnings", []) if w.get("kind") in _WARNING_KINDS],
            longest_tq_request=_longest_request(data.get("longest_tq_request")),
            row_store_identity=data.get("row_store_identity"),
            bytes=Bytes.from_dict(data.get("bytes")),
            storage=StorageFill.from_dict(data.get("storage")),
            pacing_ms={str(k): float(v) for k, v in (data.get("pacing_ms") or {}).items()},
            listings={str(p): HowListed.from_dict(how) for p, how in (data.get("listings") or {}).items()},
        )


def _sampled_row(data: Mapping[str, Any]) -> DeletedRow:
    """A deleted_sample entry: its JSON names the row's age `unreferenced_s` (a documented field)."""
    return DeletedRow(str(data["partition"]), str(data["key"]), float(data["unreferenced_s"]))


_WARNING_KINDS = frozenset(kind.value for kind in WarningKind)


def _warning(data: Mapping[str, Any]) -> SweepWarning:
    return SweepWarning(WarningKind(data["kind"]), str(data["message"]))


def warn(report: SweepReport, kind: WarningKind, message: str) -> None:
    """Add a warning to the report, and log it (the sidecar's and the CronJob's log say it too)."""
    log.warning("sweep %s: %s", report.run_id, message)
    report.warnings.append(SweepWarning(kind, message))


# Partitions a missing partition's message names: enough to spot the one meant.
PARTITIONS_NAMED = 10
# How alike a missing partition's name and an existing one's must be to read as a typo of it
# (difflib's ratio, its own default): `rollout_stagin` (0.97) and `staging` (0.64) of `rollout_staging`
# are, verl's `val` of `train` (0.25) is not.
TYPO_SIMILARITY = 0.6


def meant_partition(partition: str, existing: Collection[str]) -> str | None:
    """The existing partition a missing scope partition's name is most likely a typo of, if one is close."""
    close = difflib.get_close_matches(partition, sorted(existing), n=1, cutoff=TYPO_SIMILARITY)
    return close[0] if close else None


def missing_partition(partition: str, existing: Collection[str]) -> str:
    """What to say of a scope partition the row store does not have (a sweep's warning, `tq-gc check`)."""
    named = sorted(existing)
    shown = ", ".join(named[:PARTITIONS_NAMED]) + (", ..." if len(named) > PARTITIONS_NAMED else "")
    meant = meant_partition(partition, existing)
    return (
        f"scope partition {partition!r} does not exist in the row store (it has: {shown or 'none'}), "
        "swept as empty: either not written yet by the job (verl's val before its first validation: "
        "nothing to sweep there until it exists) or misspelled, and then never swept"
        + (f": did you mean {meant!r}?" if meant else "")
    )


def _longest_request(data: Mapping[str, Any] | None) -> LongestRequest | None:
    return None if not data else LongestRequest(str(data["op"]), float(data["ms"]))
