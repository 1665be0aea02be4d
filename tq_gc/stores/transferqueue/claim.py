"""The claim on a TransferQueue: the state store whose sweepers may sweep it.

Each sweeper's state store (its admissions, fences, first-seen records, lease) is its whole view of
what is referenced. Two sweepers that do not share one (two memory:// sidecars, each state living in
its own actor; a sidecar and a CronJob on different Redis URLs, DBs or namespaces) each hold a lease of
their own and each deletes rows that only the other's publishers hold. So before it plans, a sweep
holds the TQ's claim for its state store's identity (`state_identity`): what the store is, not how it
is reached: the random id written once into it (StateStore.store_id; a URL names a store in many ways,
`localhost` names another one in each pod, `?db=` overrides the path) and the namespace; each memory://
store has an id of its own.

The claim is a named Ray actor in TQ's own Ray namespace, keyed by the controller's actor id (a new TQ
starts unclaimed), found or created in one atomic call (`get_if_exists`) by every sweeper of the
cluster. It is not detached: Ray ends it with the process that created it, so a crashed holder's claim
ends with its process, and `release()` (sidecar shutdown, the end of a CLI run) ends it at once.
Sweepers of the same state share it: the lease in that store orders them. A sweeper of another state
finds it held and its sweep is skipped with nothing deleted, and a reason that names the holder.

A dry run only looks (it deletes nothing, so it takes nothing); it is skipped too when the TQ is
claimed for another state, as an executing sweep would be.

What it does not cover: sweepers that never overlap in time (two CronJobs on different stores) take it
in turn; a sweeper that shares a claim (same state) and is mid-sweep when the claim's creator ends goes
on to the end of that sweep unclaimed, and another state's sweeper may claim the TQ meanwhile (whose
first sweeps delete nothing: its rows' clocks restart after a gap longer than the grace); a hung holder
keeps its claim while its process lives.

The actor's class is built inside a function so that Ray ships its code by value: a CronJob may join a
cluster whose workers do not have tq-gc installed.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from tq_gc.config import Config, redact_url
from tq_gc.errors import StoreUnavailable, TqGcError, TransferQueueNotFound
from tq_gc.state.base import StateStore
from tq_gc.stores.transferqueue.attach import CONTROLLER_NAMESPACE, find_controller

CLAIM_NAME_PREFIX = "tq-gc-claim-"
CALL_TIMEOUT_SECONDS = 30.0
# A claim just released (or whose holder just died) is still found by name for a moment, then answers
# that it is dead: find it again, a few times.
FIND_ATTEMPTS = 20
FIND_RETRY_SECONDS = 0.5
MEMORY_SCHEME = "memory"


def state_identity(state: StateStore) -> str:
    """Which state store, and which namespace in it, a sweeper keeps its view in: two sweepers share
    one exactly when these are equal. Reads the store's id (StoreUnavailable if it cannot)."""
    return f"state store {state.store_id()} namespace {state.namespace!r}"


def state_address(state_url: str, holder: str) -> str:
    """Where a sweeper's state store is, for people (never compared): the URL without secrets, or for
    memory:// the process hosting it."""
    if urlsplit(state_url).scheme.lower() == MEMORY_SCHEME:
        return f"memory:// hosted by {holder}"
    return redact_url(state_url)


def refusal(ours: dict[str, str], theirs: dict[str, str]) -> str | None:
    """Why a sweeper with claimant `ours` must not sweep a TQ claimed by `theirs`; None if it may."""
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


def _shown(claimant: dict[str, str]) -> str:
    where = claimant.get("where")
    return f"{claimant['identity']} ({where})" if where else claimant["identity"]


@functools.cache
def _claim_actor() -> Any:
    """The claim's Ray actor class, made once per process (Ray exports a class at each ray.remote)."""
    import ray

    return ray.remote(_claim_actor_class())


def _claim_actor_class() -> type:
    class TqGcClaim:
        """The claim: who holds it, for which state. Its life is its creator's."""

        def __init__(self, claimant: dict[str, str]) -> None:
            self._claimant = dict(claimant)

        def claimant(self) -> dict[str, str]:
            return self._claimant

    return TqGcClaim


class TqClaim:
    """One sweeper's hold on the claim of the job's TQ (found by name in the Ray cluster)."""

    def __init__(self, where: str, holder: str, ray_address: str) -> None:
        # identity: read from the state store when the claim is first held (state_identity)
        self._ours = {"identity": "", "where": where, "holder": holder, "token": uuid.uuid4().hex}
        self._ray_address = ray_address
        self._owned: tuple[str, Any] | None = None  # (name, handle) of the claim this sweeper created

    @property
    def identity(self) -> str:
        return self._ours["identity"]

    @property
    def claimant(self) -> dict[str, str]:
        """What this sweeper's claim records: its state's identity, its holder name, its token."""
        return dict(self._ours)

    def identify(self, state: StateStore) -> None:
        """Learn which store this sweeper's state is (its id, read from it), before holding the claim.
        A store restarted empty has a new id: the claim this sweeper already holds stays its own."""
        self._ours["identity"] = state_identity(state)

    def hold(self, take: bool, state: StateStore) -> str | None:
        """Hold the claim for this sweeper's state (`take`: create it if nobody holds it), or say why
        this sweeper must not sweep: the refusal, or None. StoreUnavailable if the claim or the state
        store's id cannot be read."""
        self.identify(state)
        theirs = self.holder_of_claim(take)
        if theirs is None:
            return None
        if theirs["token"] == self._ours["token"]:
            return None
        return refusal(self._ours, theirs)

    def holder_of_claim(self, take: bool = False) -> dict[str, str] | None:
        """The claimant of the TQ's claim (taken for us first if `take` and nobody holds it), or None when
        nobody holds it or there is no TQ to claim (the row store then fails on its own)."""
        import ray

        if not ray.is_initialized():  # no Ray: the row store is not a TQ, there is nothing to claim
            return None
        try:
            controller = find_controller(self._ray_address)
        except TransferQueueNotFound:
            return None
        # ActorHandle._actor_id: Ray's own, stable since Ray 1.x; the claim of a new TQ is a new one.
        name = CLAIM_NAME_PREFIX + controller._actor_id.hex()
        last_error: Exception | None = None
        for _ in range(FIND_ATTEMPTS):
            handle = self._owned_as(name) or (self._create(name) if take else _find(name))
            if handle is None:
                return None
            try:
                theirs: dict[str, str] = ray.get(handle.claimant.remote(), timeout=CALL_TIMEOUT_SECONDS)
            except ray.exceptions.RayActorError as exc:  # released, or its holder died: find it again
                last_error, self._owned = exc, None
                time.sleep(FIND_RETRY_SECONDS)
                continue
            except ray.exceptions.GetTimeoutError as exc:
                raise StoreUnavailable(f"the TransferQueue's claim {name!r} did not answer: {exc}") from exc
            if theirs["token"] == self._ours["token"]:
                self._owned = (name, handle)
            return theirs
        raise StoreUnavailable(f"the TransferQueue's claim {name!r} kept vanishing: {last_error}")

    def _owned_as(self, name: str) -> Any:
        """Our own claim's handle, if it is this TQ's (a claim of a TQ since replaced is not)."""
        if self._owned is None or self._owned[0] != name:
            return None
        return self._owned[1]

    def _create(self, name: str) -> Any:
        return (
            _claim_actor()
            .options(
                name=name,
                namespace=CONTROLLER_NAMESPACE,
                get_if_exists=True,  # atomic find-or-create: of two sweepers racing, one creates it
                lifetime=None,  # owned by this process: it ends with it
                max_restarts=0,
                num_cpus=0,
            )
            .remote(self._ours)
        )

    def release(self) -> None:
        """End the claim if this sweeper created it (idempotent); one it shares is its creator's."""
        owned, self._owned = self._owned, None
        if owned is None:
            return
        import ray

        with contextlib.suppress(Exception):  # already gone with its process: released all the same
            ray.kill(owned[1], no_restart=True)


def _find(name: str) -> Any:
    import ray

    try:
        return ray.get_actor(name, namespace=CONTROLLER_NAMESPACE)
    except ValueError:  # Ray's answer for "no live actor of that name"
        return None


def sidecar_holder(sidecar_name: str, process: str) -> str:
    """How a sidecar names itself as a sweeper (its lease holder, its claim's holder)."""
    return f"sidecar:{sidecar_name}@{process}"


def describe_claim(config: Config, holder: str, state: StateStore) -> str:
    """For `tq-gc check`: who claims the job's TQ (reading it only). TqGcError if a sweeper of another
    state store does: this config's sweeps would be skipped."""
    claim = claim_for(config, holder)
    claim.identify(state)
    theirs = claim.holder_of_claim(take=False)
    if theirs is None:
        return "no sweeper claims it: the first executing sweep takes it for its state"
    ours_memory = config.state_url.startswith(f"{MEMORY_SCHEME}://")
    this_sidecar = theirs["holder"].startswith(sidecar_holder(config.sidecar.name, ""))
    if theirs["identity"] == claim.identity or (ours_memory and this_sidecar):
        return f"claimed by {theirs['holder']}, for this config's state"
    reason = refusal(claim.claimant, theirs)
    raise TqGcError(f"sweeps with this config would be skipped (tq_claimed): {reason}")


def claim_for(config: Config, holder: str) -> TqClaim:
    """The claim a sweeper with this config and holder name holds on the job's TQ."""
    return TqClaim(state_address(config.state_url, holder), holder, config.transfer_queue.ray_address)


@contextlib.contextmanager
def claimed(config: Config, holder: str, enabled: bool = True) -> Iterator[TqClaim | None]:
    """A sweeper's claim for the block (None if not `enabled`), released at its end."""
    claim = claim_for(config, holder) if enabled else None
    try:
        yield claim
    finally:
        if claim is not None:
            claim.release()


__all__ = [
    "TqClaim",
    "claim_for",
    "claimed",
    "describe_claim",
    "refusal",
    "sidecar_holder",
    "state_address",
    "state_identity",
]
