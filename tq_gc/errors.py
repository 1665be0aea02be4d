"""Every error tq-gc raises on purpose, and how a sweep that meets one ends: each class carries the
outcome and cause its sweep reports, and its message is the report's reason (the CLI's exit code
follows the outcome: skipped 3, aborted 4).

    TqGcError                                                     outcome  cause
    ├── ConfigError              bad config or usage; nothing     aborted  error, and raised on: exit 2
    │   │                        was touched
    │   └── RowStoreNotFound     no row store to attach to (we never create one)
    │       └── TransferQueueNotFound  no TQ controller in the Ray cluster
    ├── StoreUnavailable         the state store or row store     aborted  store_failed
    │   │                        failed; delete nothing more
    │   ├── StoreRefused         the state store answers but refuses this client (password, ACL,
    │   │                        TLS, maxclients): the trainer kit raises it to the job at once
    │   └── BarrierLost          the write barrier vanished or was shortened (evicted?)
    ├── ReferenceSourceError     a reference source could not     aborted  source_failed
    │                            be read completely
    ├── CheckpointInProgress     a checkpoint directory is being  skipped  checkpoint_in_progress
    │                            written: its references are not
    │                            readable yet
    ├── BaselineRebuilding       a source reads as empty while    skipped  baseline_rebuilding
    │                            the store's record of what the
    │                            sources named is under a grace
    │                            old (a new store, or one
    │                            restarted empty)
    ├── LeaseHeld                another sweeper holds the lease  skipped  lease_held
    ├── TqClaimed                a sweeper of another state store skipped  tq_claimed
    │                            claims the TransferQueue
    ├── LeaseLost                our lease expired or was taken;  aborted  lease_lost
    │   │                        stop before the next delete
    │   ├── SweeperPaused        so long since the last renewal that the lease may be someone
    │   │                        else's by the clear: stop before clearing
    │   └── StoreInterrupted     the state store was away (a renewal failed) or restarted mid-sweep:
    │                            what publishers did meanwhile is in no barrier; delete nothing more
    ├── FenceUp                  a checkpoint fence is up         skipped  fence_up
    ├── FenceRaised              a fence is up, or came and went, skipped  fence_raised
    │   │                        since the sweep read its
    │   │                        references; stop before the next delete
    │   └── FenceEpochMoved      seen at a delete batch's re-check: the fence epoch moved
    ├── BlastRadiusExceeded      more rows eligible than          aborted  blast_radius
    │                            max_delete_fraction allows
    └── Interrupted              the sweeper was asked to stop    aborted  stopped
                                 (the sidecar's shutdown); delete
                                 nothing more

Any other exception ends a sweep aborted with cause `error`, its reason naming its type.

A sweep never retries inside itself: a transient failure ends this sweep, and the next one starts
from a fresh snapshot. That is what keeps "fail closed" simple.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from tq_gc.redaction import redact_url
from tq_gc.report import Cause, Outcome


class TqGcError(Exception):
    """Base of every error tq-gc raises on purpose: a sweep that meets one ends with its `outcome` and
    `cause`, its message the report's reason."""

    outcome: ClassVar[Outcome] = Outcome.ABORTED
    cause: ClassVar[Cause] = Cause.ERROR
    # Raised on to the sweep's caller once the run is recorded: what the caller must fix.
    reaches_caller: ClassVar[bool] = False


class ConfigError(TqGcError):
    """The config or the command line is wrong. The message names the field and the fix."""

    reaches_caller = True


class RowStoreNotFound(ConfigError):
    """There is no row store to attach to (yet): tq-gc never creates one. A sidecar that may start before
    the job's store takes it for a store not there yet (stores/deferred.py), and says `not_yet`."""

    not_yet: ClassVar[str] = "has the job created its row store yet?"


class TransferQueueNotFound(RowStoreNotFound):
    not_yet = "has the job created its TransferQueue yet?"

    def __init__(self, ray_address: str) -> None:
        super().__init__(
            f"no TransferQueueController (namespace 'transfer_queue') in the Ray cluster at "
            f"{redact_url(ray_address)!r}: tq-gc attaches to a running job's TransferQueue and never "
            "creates one. "
            "Start the training job first, or set transfer_queue.ray_address to its cluster."
        )
        self.ray_address = ray_address


class StoreUnavailable(TqGcError):
    """The state store or the row store failed mid-operation."""

    cause = Cause.STORE_FAILED


class StoreRefused(StoreUnavailable):
    """The state store answered, and refused this client: a wrong password, an ACL user without the
    commands or the scripting tq-gc needs, a TLS or protocol mismatch, `maxclients` reached. Unlike a
    store that is down for everyone, the sweepers may well reach it meanwhile, so a publisher must not
    go on as if protected (tq_gc.publish.client.GcClient raises it). The message names cause and fix."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message}. Fix: {fix}")
        self.fix = fix


class BarrierLost(StoreUnavailable):
    """The write barrier of the sweep's lease is missing or shorter than what was read of it (evicted
    under a maxmemory policy, deleted, trimmed): the admissions it lost are unknown, so the sweep deletes
    nothing more."""

    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"the write barrier of namespace {namespace!r} is missing or was shortened mid-sweep (evicted? "
            "the state store's maxmemory-policy must be noeviction): the admissions it held are unknown; "
            "stopping before the next delete"
        )


class ReferenceSourceError(TqGcError):
    """A reference source could not be read completely: the sweep must delete nothing."""

    cause = Cause.SOURCE_FAILED

    def __init__(self, source: str, detail: str) -> None:
        super().__init__(f"reference source {source!r} failed: {detail}")
        self.source = source
        self.detail = detail


class BaselineRebuilding(TqGcError):
    """A reference source reads as empty, and the state store's record of what the sources named
    (references/emptied.py) is younger than a grace: nothing tells an unmounted volume from a released
    one yet, so the sweep skips, advancing no first-seen record, until that record is a grace old."""

    outcome = Outcome.SKIPPED
    cause = Cause.BASELINE_REBUILDING

    def __init__(self, sources: list[str], age_seconds: float, grace_seconds: float) -> None:
        named = ", ".join(repr(source) for source in sources)
        super().__init__(
            f"reference source(s) {named} read as empty, and the state store's record of what the sources "
            f"named is {age_seconds:.0f} s old, under a grace ({grace_seconds:g} s): the store is new or "
            "restarted empty, so an empty source is not trusted yet (an unmounted volume looks the same). "
            "Nothing is deleted until that record is a grace old; if the source is empty on purpose, "
            "`tq-gc sweep --accept-empty SOURCE` or `when_empty: accept` on it"
        )
        self.sources = sources


class CheckpointInProgress(TqGcError):
    """A checkpoint directory a manifest glob covers is being written (or swapped): the references it
    will hold cannot be read yet, so the sweep skips instead of reading without them."""

    outcome = Outcome.SKIPPED
    cause = Cause.CHECKPOINT_IN_PROGRESS

    def __init__(self, glob: str, directories: list[str], mtimes: dict[str, float] | None = None) -> None:
        more = len(directories) - 5
        shown = ", ".join(directories[:5]) + (f" and {more} more" if more > 0 else "")
        super().__init__(
            f"checkpoint being written beside the manifests of {glob!r}: {shown}. The sweep skips until it "
            "is committed; a directory left behind by a crashed save blocks every sweep until it is removed"
        )
        self.glob = glob
        self.directories = directories
        self.mtimes = dict(mtimes or {})  # directory -> its mtime (epoch seconds), where it was read

    def oldest(self) -> tuple[str, float] | None:
        """The blocking directory modified longest ago, and its mtime (epoch seconds); None if unknown."""
        if not self.mtimes:
            return None
        directory = min(self.mtimes, key=lambda name: self.mtimes[name])
        return directory, self.mtimes[directory]


class LeaseHeld(TqGcError):
    """Another sweeper holds the namespace's lease: this sweep skips, the holder sweeps."""

    outcome = Outcome.SKIPPED
    cause = Cause.LEASE_HELD

    def __init__(self, holder: str) -> None:
        super().__init__(f"lease held by {holder}")
        self.holder = holder


class TqClaimed(TqGcError):
    """A sweeper of another state store claims the job's TransferQueue (stores/transferqueue/claim.py):
    its lease and registry are not ours, so this sweep skips. The message names the holder."""

    outcome = Outcome.SKIPPED
    cause = Cause.TQ_CLAIMED


class LeaseLost(TqGcError):
    cause = Cause.LEASE_LOST

    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"the sweep lease of namespace {namespace!r} expired or was taken by another sweeper; "
            "stopping before the next delete"
        )


class SweeperPaused(LeaseLost):
    """Right before a clear, the last renewal on the sweeping thread is too old to vouch for the lease:
    the sweeper was paused (SIGSTOP, a long GC pause) and the store would not tell it in time."""

    def __init__(self, elapsed_seconds: float) -> None:
        TqGcError.__init__(
            self,
            f"{elapsed_seconds:.1f} s passed between the lease renewal and the clear (the sweeper was "
            "paused?); stopped before clearing, the lease may already be someone else's",
        )
        self.elapsed_seconds = elapsed_seconds


class StoreInterrupted(LeaseLost):
    """The lease lives, but the state store was away (a renewal failed) or restarted (another server
    process, a failover) since the sweep took it: publishers that could not admit meanwhile moved rows
    outside every write barrier, so the sweep deletes nothing more; the next sweep takes the lease
    again and reads everything afresh."""

    def __init__(self, why: str) -> None:
        TqGcError.__init__(
            self,
            f"the state store was interrupted mid-sweep ({why}): what publishers did while it was away is "
            "in no write barrier; stopping before the next delete, the next sweep starts afresh",
        )
        self.why = why


class FenceUp(TqGcError):
    """A checkpoint fence is up: no delete happens while it is."""

    outcome = Outcome.SKIPPED
    cause = Cause.FENCE_UP

    def __init__(self, fences: Iterable[str]) -> None:
        self.fences = sorted(fences)
        super().__init__(f"checkpoint fence up: {', '.join(self.fences)}")


class FenceRaised(TqGcError):
    outcome = Outcome.SKIPPED
    cause = Cause.FENCE_RAISED

    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"a checkpoint fence of namespace {namespace!r} is up, or was raised since this sweep read its "
            "references (the checkpoint may have written a manifest this sweep did not read); stopping "
            "before the next delete"
        )


class FenceEpochMoved(FenceRaised):
    """A delete batch's re-check found the fence epoch moved since the sweep read its references: a
    fence came (and maybe went) in between."""

    def __init__(self) -> None:
        TqGcError.__init__(
            self,
            "a checkpoint fence was raised since this sweep read its references (it may have written a "
            "manifest this sweep did not read); the next sweep starts afresh",
        )


class BlastRadiusExceeded(TqGcError):
    """The plan would delete more of the in-scope rows than max_delete_fraction allows: nothing is
    deleted, the reason says how many."""

    cause = Cause.BLAST_RADIUS


class Interrupted(TqGcError):
    """The sweeper was asked to stop (Collector.stop): before its next request to the row store, or a
    paced read stopped before its next request."""

    cause = Cause.STOPPED
