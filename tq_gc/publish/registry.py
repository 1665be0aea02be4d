"""The publisher API: what rollout workers and the trainer import to protect the rows they still use.

    reg = AdmissionRegistry.connect("redis://127.0.0.1:6379/0", namespace="job-42")
    reg.admit("adm-1", rows={"rollout_staging": ["r7_g0_a1/call3"]}, ttl_seconds=600)  # durable on return
    with reg.checkpoint_fence("ckpt-7"): ...            # no delete while the checkpoint is written

Admissions are leases on the state store's clock: a publisher that dies stops protecting its rows after
its TTL, which is the point of a lease and why every admission needs one. The collector reads them back
through tq_gc.references.admissions.AdmissionsSource; tq_gc.publish.client.GcClient wraps this for trainers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, Protocol

from tq_gc.errors import ConfigError, StoreRefused, StoreUnavailable
from tq_gc.publish.holders import by_public_name, held_name, new_holder, public_name
from tq_gc.publish.inputs import checked_name, checked_rows, checked_ttl_ms, checked_whole_ms
from tq_gc.state.base import AdmissionRows, AdmissionStore
from tq_gc.state.url import is_memory_url

log = logging.getLogger(__name__)

# checkpoint_fence: how long to wait for a delete batch in flight (a batch is seconds at most; a sweeper
# that died mid-batch stops counting after its lease TTL, 60 s by default), and how often to look.
DELETE_WAIT_SECONDS = 120.0
DELETE_POLL_SECONDS = 0.02
# A lease held by a block (checkpoint_fence here, GcClient.holding) is renewed at a third of its TTL, so
# that two renewals can fail in a row before it lapses, and at least every RENEW_MAX_SECONDS, so that one a
# restarted store lost is back well within the shortest grace a sweeper allows (60 s). A renewal that
# failed (the store down) is retried every RETRY_SECONDS, so that it is back as soon as the store is.
RENEW_FRACTION = 1 / 3
RENEW_MAX_SECONDS = 10.0
RETRY_SECONDS = 0.5


def renew_period_seconds(ttl_seconds: float, at_most_seconds: float = RENEW_MAX_SECONDS) -> float:
    """How often a lease of ttl_seconds held by a block is renewed: a third of it, at most at_most_seconds."""
    return min(ttl_seconds * RENEW_FRACTION, at_most_seconds)


class _Closeable(Protocol):
    def close(self) -> None: ...


class AdmissionRegistry:
    """The publisher API. Every write is durable on return; every method raises StoreUnavailable (but
    checkpoint_fence(on_store_down="continue"), which goes on and raises the fence once the store is back;
    tq_gc.publish.client.GcClient fails safe that way throughout)."""

    def __init__(self, backend: AdmissionStore) -> None:
        self._backend = backend
        self._holder = new_holder()
        self._holder_pid = os.getpid()
        self._owned: _Closeable | None = None  # set by connect(): close only what we opened
        self._fences_up: set[str] = set()  # checkpoint_fence blocks running, by fence name
        self._fences_lock = threading.Lock()

    @classmethod
    def connect(cls, url: str, namespace: str = "default") -> AdmissionRegistry:
        """A registry on the shared state store at `url` (redis://, rediss://, unix://)."""
        from tq_gc.state import open_state  # the state package imports Redis: only when connecting

        if is_memory_url(url):
            # A memory:// registry made here would live in this process only: the collector would
            # never see it and would delete the rows it claims to protect.
            raise ConfigError(
                "with state_url memory:// the registry lives inside the tq-gc sidecar actor: use "
                "tq_gc.sidecar_registry() (it finds the sidecar, one per Ray cluster, by its name), or a "
                "redis:// state_url"
            )
        state = open_state(url, namespace)
        registry = cls(state)
        registry._owned = state
        return registry

    @property
    def holder(self) -> str:
        """This registry's holder identity (tq_gc/publish/holders.py), written with every admission and
        fence it makes. A process forked from this one gets one of its own."""
        self._own_after_fork()
        return self._holder

    def _own_after_fork(self) -> None:
        """In a process forked from the one that made this registry: a holder identity of its own, and
        fresh fence bookkeeping (the parent's blocks and its lock, perhaps held at the fork, are not ours)."""
        if os.getpid() != self._holder_pid:
            self._holder, self._holder_pid = new_holder(), os.getpid()
            self._fences_up, self._fences_lock = set(), threading.Lock()

    def _held(self, what: str, name: str) -> str:
        return held_name(checked_name(what, name), self.holder)

    def admit(self, admission_id: str, rows: Mapping[str, Any], ttl_seconds: float) -> None:
        """Protect `rows` ({partition: [keys]}) for ttl_seconds; admitting an id again replaces it. The
        admission is this registry's: another registry (another worker) admitting the same id holds an
        admission of its own, which this one's release leaves alone."""
        name = self._held("admission_id", admission_id)
        self._backend.admit(name, checked_rows(rows), checked_ttl_ms(ttl_seconds))

    def renew(self, admission_id: str, ttl_seconds: float) -> bool:
        """Extend to ttl_seconds from now; False if the admission expired or is unknown (re-admit)."""
        name = self._held("admission_id", admission_id)
        return self._backend.renew_admission(name, checked_ttl_ms(ttl_seconds))

    def release(self, admission_id: str) -> None:
        """End this registry's admission `admission_id` (another registry's of the same id stays)."""
        self._backend.release_admission(self._held("admission_id", admission_id))

    @contextmanager
    def admission(self, admission_id: str, rows: Mapping[str, Any], ttl_seconds: float) -> Iterator[str]:
        """Admit for the duration of the block; released on exit, also when the block raises."""
        self.admit(admission_id, rows, ttl_seconds)
        try:
            yield admission_id
        except BaseException:
            self._release_keeping_error(admission_id)
            raise
        self.release(admission_id)

    def _release_keeping_error(self, admission_id: str) -> None:
        # The block's own error is the one to report; an unreleased admission expires after its TTL.
        try:
            self.release(admission_id)
        except StoreUnavailable as exc:
            log.warning("could not release admission %r (it expires after its TTL): %s", admission_id, exc)

    def known_grace_seconds(self) -> float | None:
        """The shortest grace of the sweepers, where the backend can tell (the sidecar's, with memory://);
        None where it cannot (a Redis shared by sweepers that do not record theirs) or does not answer."""
        grace_seconds = getattr(self._backend, "grace_seconds", None)
        if not callable(grace_seconds):
            return None
        try:
            return float(grace_seconds())
        except StoreUnavailable:
            return None

    def live(self) -> dict[str, AdmissionRows]:
        """{admission_id: {partition: [keys]}} for every admission not yet expired, of every holder: an
        id held by several holders has the rows of them all."""
        return by_public_name(self._backend.live_admissions())

    def fence(self, name: str, ttl_seconds: float) -> None:
        """Stop every delete until unfence(name) or ttl_seconds pass (e.g. around a checkpoint). The fence
        is this registry's: another (another rank) raising the same name raises one of its own, and
        deletes wait until every holder lowered theirs."""
        self._backend.raise_fence(self._held("fence name", name), checked_ttl_ms(ttl_seconds))

    def unfence(self, name: str) -> None:
        """Lower this registry's fence `name` (another holder's of the same name stays up)."""
        self._backend.lower_fence(self._held("fence name", name))

    def fences(self) -> dict[str, int]:
        """Fences up now, of every holder: {name: expires_at_ms on the store's clock, the latest}."""
        fences: dict[str, int] = {}
        for stored, expires_at_ms in self._backend.live_fences().items():
            name = public_name(stored)
            fences[name] = max(expires_at_ms, fences.get(name, expires_at_ms))
        return fences

    @contextmanager
    def checkpoint_fence(
        self,
        name: str,
        ttl_seconds: float = 300.0,
        wait_seconds: float = DELETE_WAIT_SECONDS,
        on_store_down: Literal["raise", "continue"] = "raise",
        on_refused: Literal["raise", "continue"] = "raise",
    ) -> Iterator[str]:
        """Fence for the duration of the block, which starts only once no delete batch is in flight.

        A fence stops every delete that has not started; a batch already clearing could still remove
        rows the checkpoint is recording. Sweepers mark a batch in flight in the same atomic step that
        checks the fences, so once the fence is up and no batch is marked, none can start until the
        fence comes down. Raises TimeoutError (fence lowered) if a batch is still in flight after
        wait_seconds; a sweeper that died mid-batch stops counting after its lease's TTL.

        The fence lasts as long as the block, however long: a daemon thread raises it again every
        renew_period_seconds(ttl_seconds) while the block runs. A holder that crashes (its process
        gone) stops renewing, and its fence expires ttl_seconds after the last renewal.

        Raises ValueError if a checkpoint_fence block of this registry already holds `name` up (nested,
        another thread): the first block to end would lower the fence the other still needs.

        With on_store_down="continue" (GcClient's) a store that does not answer is logged and the block
        runs all the same: the fence is raised again every RETRY_SECONDS until the store answers, and
        the wait for a batch in flight is skipped (none can be marked in a store that is down; one
        already clearing when it went down may end during the block). tq_gc/publish/client.py says why no
        delete slips in before the fence is up.

        A store that answers but refuses this client (StoreRefused: a wrong password, an ACL user
        without scripting, maxclients) is not a store down for everyone: the sweepers may reach it, so
        the block does not run unfenced. With on_refused="raise" (the default, whatever on_store_down
        says) StoreRefused is raised before the block runs, and at its end if a renewal was refused
        while it ran; on_refused="continue" treats a refusal as a store down."""
        go_on = store_down_policy(on_store_down)
        refused_go_on = store_down_policy(on_refused, "on_refused")
        ttl_ms = checked_ttl_ms(ttl_seconds)
        with self._claimed_fence(name):
            raised = self._raise_fence_first(name, ttl_ms, go_on, refused_go_on)
            keeper = _FenceKeeper(self, name, ttl_seconds, raised)
            try:
                if raised:
                    self._wait_for_no_delete_unless_down(wait_seconds, go_on, refused_go_on)
                yield name
            except BaseException:
                keeper.stop()
                self._unfence_keeping_error(name)
                raise
            keeper.stop()
            if go_on:
                self._unfence_keeping_error(name)
            else:
                self.unfence(name)
            if keeper.refused is not None and not refused_go_on:
                raise keeper.refused

    def _raise_fence_first(self, name: str, ttl_ms: int, go_on: bool, refused_go_on: bool) -> bool:
        """Raise the fence; False (logged) if the store is down and the caller goes on regardless."""
        try:
            self._backend.raise_fence(self._held("fence name", name), ttl_ms)
        except StoreUnavailable as exc:
            if not go_on or (isinstance(exc, StoreRefused) and not refused_go_on):
                raise
            log.warning(
                "could not raise fence %r, the checkpoint goes on (the fence is retried every %g s): %s",
                name,
                RETRY_SECONDS,
                exc,
            )
            return False
        return True

    def _wait_for_no_delete_unless_down(self, wait_seconds: float, go_on: bool, refused_go_on: bool) -> None:
        try:
            self._wait_for_no_delete(wait_seconds)
        except StoreUnavailable as exc:
            if not go_on or (isinstance(exc, StoreRefused) and not refused_go_on):
                raise
            log.warning("could not ask whether a delete batch is in flight; the checkpoint goes on: %s", exc)

    @contextmanager
    def _claimed_fence(self, name: str) -> Iterator[None]:
        name = checked_name("fence name", name)
        self._own_after_fork()
        with self._fences_lock:
            if name in self._fences_up:
                raise ValueError(
                    f"fence {name!r} is already up in a checkpoint_fence block of this registry: nested or "
                    "concurrent checkpoints need fence names of their own (the step, the rank)"
                )
            self._fences_up.add(name)
        try:
            yield
        finally:
            with self._fences_lock:
                self._fences_up.discard(name)

    def _wait_for_no_delete(self, wait_seconds: float) -> None:
        deadline = time.monotonic() + wait_seconds
        while self._backend.delete_in_flight():
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"a tq-gc delete batch was still in flight after {wait_seconds:g} s; the checkpoint "
                    "fence was lowered. Retry, or raise wait_seconds to the sweepers' lease TTL (60 s)"
                )
            time.sleep(DELETE_POLL_SECONDS)

    def _unfence_keeping_error(self, name: str) -> None:
        try:
            self.unfence(name)
        except StoreUnavailable as exc:
            log.warning("could not lower fence %r (it expires after its TTL): %s", name, exc)

    def close(self) -> None:
        """Close the store connect() opened; a backend passed in is left to its owner."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self) -> AdmissionRegistry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _FenceKeeper:
    """Raises one fence again every renew period until stopped (every RETRY_SECONDS while the store does
    not answer), from a daemon thread of its own: a process that dies takes it along, and its fence
    expires by its TTL."""

    def __init__(self, registry: AdmissionRegistry, name: str, ttl_seconds: float, raised: bool) -> None:
        self._registry = registry
        self._name = name
        self._ttl_seconds = ttl_seconds
        self._raised = raised
        self.refused: StoreRefused | None = None  # the first renewal the store refused while the block ran
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"tq-gc-fence:{name}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        period_seconds = renew_period_seconds(self._ttl_seconds)
        retry_seconds = min(RETRY_SECONDS, period_seconds)
        while not self._stop.wait(period_seconds if self._raised else retry_seconds):
            try:
                self._registry.fence(self._name, self._ttl_seconds)
            except StoreRefused as exc:
                if self.refused is None:
                    log.error("the store refused to renew fence %r (retrying): %s", self._name, exc)
                    self.refused = exc
                self._raised = False
                continue
            except Exception as exc:  # StoreUnavailable, or what a sidecar raised: retried all the same
                if self._raised:
                    log.warning("could not renew fence %r (retrying): %s", self._name, exc)
                self._raised = False
                continue
            if not self._raised:
                log.info("fence %r raised (it was pending)", self._name)
            self._raised = True

    def stop(self) -> None:
        """Stop renewing; returns once no renewal is under way (one landing after the fence is lowered
        would raise it again until its TTL)."""
        self._stop.set()
        self._thread.join()


def store_down_policy(policy: str, what: str = "on_store_down") -> bool:
    """True for "continue", False for "raise"; ValueError naming `what` otherwise."""
    if policy not in ("raise", "continue"):
        raise ValueError(f'{what} must be "raise" or "continue", got {policy!r}')
    return policy == "continue"


__all__ = [
    "DELETE_WAIT_SECONDS",
    "RENEW_MAX_SECONDS",
    "RETRY_SECONDS",
    "AdmissionRegistry",
    "AdmissionStore",
    "checked_name",
    "checked_rows",
    "checked_ttl_ms",
    "checked_whole_ms",
    "renew_period_seconds",
    "store_down_policy",
]
