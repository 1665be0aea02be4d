"""A row store's claim: which state store's sweepers may sweep it (docs/operations.md, "the claim").

Each sweeper's state store (its admissions, fences, first-seen records, lease) is its whole view of
what is referenced. Two sweepers that do not share one each delete rows that only the other's
publishers hold. So before it plans, a sweep holds the row store's claim for its state store's identity
(`state_identity`): what the store is, not how it is reached (the random id written once into it, and
the namespace). A row store shared by sweepers of many processes (a TransferQueue) hands out a
`StoreClaim` (RowStore.claim); one that lives in this process needs none.

This module is the generic half: who a claimant is, why one must not sweep beside another, what
`tq-gc check` says. How a claim is held across processes is the row store's own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from tq_gc.config import Config
from tq_gc.errors import TqGcError
from tq_gc.redaction import redact_url
from tq_gc.state.base import StateStore
from tq_gc.state.url import is_memory_url

# {"identity": state_identity, "where": for people, "holder": the sweeper's name, "token": unique per claim}
Claimant = dict[str, str]


class StoreClaim(ABC):
    """One sweeper's hold on a row store's claim, from the first sweep that takes it until release()
    (or the end of the sweeper's process)."""

    @abstractmethod
    def hold(self, take: bool, state: StateStore) -> str | None:
        """Hold the claim for this sweeper's state (`take`: take it if nobody holds it), or say why this
        sweeper must not sweep: the refusal, or None. StoreUnavailable if it cannot be read."""

    @abstractmethod
    def holder_now(self, state: StateStore) -> tuple[Claimant, Claimant | None]:
        """Read only: this sweeper's claimant for `state`, and who holds the claim (None: nobody)."""

    @abstractmethod
    def release(self) -> None:
        """End the claim if this sweeper took it (idempotent)."""


def state_identity(state: StateStore) -> str:
    """Which state store, and which namespace in it, a sweeper keeps its view in: two sweepers share
    one exactly when these are equal. Reads the store's id (StoreUnavailable if it cannot)."""
    return f"state store {state.store_id()} namespace {state.namespace!r}"


def state_address(state_url: str, holder: str) -> str:
    """Where a sweeper's state store is, for people (never compared): the URL without secrets, or for
    memory:// the process hosting it."""
    if is_memory_url(state_url):
        return f"memory:// hosted by {holder}"
    return redact_url(state_url)


def refusal(ours: Claimant, theirs: Claimant) -> str | None:
    """Why a sweeper with claimant `ours` must not sweep a store claimed by `theirs`; None if it may."""
    if theirs["identity"] == ours["identity"]:
        return None
    return (
        f"this TransferQueue is claimed by the sweeper {theirs['holder']}, whose state is "
        f"{_shown(theirs)}; this sweeper's state is {_shown(ours)}. Sweepers that do not share "
        "one state store each delete rows that only the other's publishers hold, so this sweep deleted "
        "nothing. Run one sweeper per TransferQueue, or give both the same state_url and namespace "
        "(a memory:// sidecar shares its state with nobody: use redis:// for more than one sweeper); "
        "the claim ends when that sweeper stops or its process dies"
    )


def _shown(claimant: Claimant) -> str:
    where = claimant.get("where")
    return f"{claimant['identity']} ({where})" if where else claimant["identity"]


def sidecar_holder(sidecar_name: str, process: str) -> str:
    """How a sidecar names itself as a sweeper (its lease holder, its claim's holder)."""
    return f"sidecar:{sidecar_name}@{process}"


def describe_claim(config: Config, claim: StoreClaim, state: StateStore, sidecar_name: str) -> str:
    """For `tq-gc check`: who claims the row store (reading it only). TqGcError if a sweeper of another
    state store does: this config's sweeps would be skipped. `sidecar_name`: the sidecar whose memory://
    state this config's is (the sidecar's fixed name, tq_gc/sidecar/names.py)."""
    ours, theirs = claim.holder_now(state)
    if theirs is None:
        return "no sweeper claims it: the first executing sweep takes it for its state"
    ours_memory = is_memory_url(config.state_url)
    this_sidecar = theirs["holder"].startswith(sidecar_holder(sidecar_name, ""))
    if theirs["identity"] == ours["identity"] or (ours_memory and this_sidecar):
        return f"claimed by {theirs['holder']}, for this config's state"
    reason = refusal(ours, theirs)
    raise TqGcError(f"sweeps with this config would be skipped (tq_claimed): {reason}")


__all__ = [
    "Claimant",
    "StoreClaim",
    "describe_claim",
    "refusal",
    "sidecar_holder",
    "state_address",
    "state_identity",
]
