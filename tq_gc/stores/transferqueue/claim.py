"""The claim on a TransferQueue: the state store whose sweepers may sweep it (stores/claims.py says
why, and who a claimant is). The TQ row store hands one to each sweeper (RowStore.claim) and ends those
it handed out when it closes.

Two sweepers that do not share one state store (two memory:// sidecars, each state living in its own
actor; a sidecar and a CronJob on different Redis URLs, DBs or namespaces) each hold a lease of their
own: the claim is what keeps the second from sweeping. A state store is known by what it is
(StateStore.store_id; a URL names a store in many ways, `localhost` names another one in each pod,
`?db=` overrides the path) and the namespace; each memory:// store has an id of its own.

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
from typing import Any

from tq_gc.errors import StoreUnavailable, TransferQueueNotFound
from tq_gc.state.base import StateStore
from tq_gc.stores.claims import Claimant, StoreClaim, refusal, state_identity
from tq_gc.stores.transferqueue.attach import CONTROLLER_NAMESPACE, find_controller

CLAIM_NAME_PREFIX = "tq-gc-claim-"
CALL_TIMEOUT_SECONDS = 30.0
# A claim just released (or whose holder just died) is still found by name for a moment, then answers
# that it is dead: find it again, a few times.
FIND_ATTEMPTS = 20
FIND_RETRY_SECONDS = 0.5


@functools.cache
def _claim_actor() -> Any:
    """The claim's Ray actor class, made once per process (Ray exports a class at each ray.remote)."""
    import ray

    return ray.remote(_claim_actor_class())


def _claim_actor_class() -> type:
    class TqGcClaim:
        """The claim: who holds it, for which state. Its life is its creator's."""

        def __init__(self, claimant: Claimant) -> None:
            self._claimant = dict(claimant)

        def claimant(self) -> Claimant:
            return self._claimant

    return TqGcClaim


class TqClaim(StoreClaim):
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
    def claimant(self) -> Claimant:
        """What this sweeper's claim records: its state's identity, its holder name, its token."""
        return dict(self._ours)

    def identify(self, state: StateStore) -> None:
        """Learn which store this sweeper's state is (its id, read from it), before holding the claim.
        A store restarted empty has a new id: the claim this sweeper already holds stays its own."""
        self._ours["identity"] = state_identity(state)

    def holder_now(self, state: StateStore) -> tuple[Claimant, Claimant | None]:
        """Read only: this sweeper's claimant for `state`, and who holds the TQ's claim."""
        self.identify(state)
        return self.claimant, self.holder_of_claim(take=False)

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

    def holder_of_claim(self, take: bool = False) -> Claimant | None:
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
                theirs: Claimant = ray.get(handle.claimant.remote(), timeout=CALL_TIMEOUT_SECONDS)
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


__all__ = ["CLAIM_NAME_PREFIX", "TqClaim"]
