"""Every error tq-gc raises on purpose, and what the sweep does about it.

    TqGcError
    ├── ConfigError              bad config or usage; nothing was touched            -> exit 2
    │   └── TransferQueueNotFound  no TQ controller to attach to (we never create one) -> exit 2
    ├── StoreUnavailable         the state store or row store failed; stop, delete nothing more
    ├── ReferenceSourceError     a reference source could not be read completely   -> abort, exit 4
    ├── CheckpointInProgress     a checkpoint directory is being written; its references are not
    │                            readable yet                                       -> skip, exit 3
    ├── LeaseLost                our lease expired or was taken; stop before the next delete
    ├── FenceRaised              a checkpoint fence is up, or came and went, since the sweep read its
    │                            references; stop before the next delete (skipped, exit 3)
    └── Interrupted              the sweeper was asked to stop (the sidecar's shutdown) while the
                                 row store listed or read: stop, delete nothing more

A sweep never retries inside itself: a transient failure ends this sweep, and the next one starts
from a fresh snapshot. That is what keeps "fail closed" simple.
"""

from __future__ import annotations


class TqGcError(Exception):
    """Base of every error tq-gc raises on purpose."""


class ConfigError(TqGcError):
    """The config or the command line is wrong. The message names the field and the fix."""


class TransferQueueNotFound(ConfigError):
    def __init__(self, ray_address: str) -> None:
        super().__init__(
            f"no TransferQueueController (namespace 'transfer_queue') in the Ray cluster at "
            f"{ray_address!r}: tq-gc attaches to a running job's TransferQueue and never creates one. "
            "Start the training job first, or set transfer_queue.ray_address to its cluster."
        )
        self.ray_address = ray_address


class StoreUnavailable(TqGcError):
    """The state store or the row store failed mid-operation."""


class ReferenceSourceError(TqGcError):
    """A reference source could not be read completely: the sweep must delete nothing."""

    def __init__(self, source: str, detail: str) -> None:
        super().__init__(f"reference source {source!r} failed: {detail}")
        self.source = source
        self.detail = detail


class CheckpointInProgress(TqGcError):
    """A checkpoint directory a manifest glob covers is being written (or swapped): the references it
    will hold cannot be read yet, so the sweep skips instead of reading without them."""

    def __init__(self, glob: str, directories: list[str]) -> None:
        more = len(directories) - 5
        shown = ", ".join(directories[:5]) + (f" and {more} more" if more > 0 else "")
        super().__init__(
            f"checkpoint being written beside the manifests of {glob!r}: {shown}. The sweep skips until it "
            "is committed; a directory left behind by a crashed save blocks every sweep until it is removed"
        )
        self.glob = glob
        self.directories = directories


class LeaseLost(TqGcError):
    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"the sweep lease of namespace {namespace!r} expired or was taken by another sweeper; "
            "stopping before the next delete"
        )


class FenceRaised(TqGcError):
    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"a checkpoint fence of namespace {namespace!r} is up, or was raised since this sweep read its "
            "references (the checkpoint may have written a manifest this sweep did not read); stopping "
            "before the next delete"
        )


class Interrupted(TqGcError):
    """The row store was asked to stop (Collector.stop): a paced read stopped before its next request."""
