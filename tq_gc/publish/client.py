"""The trainer kit: what a trainer or a rollout worker adds so that tq-gc never deletes what it still needs.

    gc = GcClient.connect("redis://gc-redis:6379/0", namespace="job-42")  # or GcClient(sidecar_registry())
    with gc.holding(f"call-{call_id}", {"rollout_staging": [staging_key, *chain_keys]}):
        write_rows(...)                   # admitted before the rows are written: never unprotected
        record_reference_elsewhere(...)   # the route plan row, the manifest: durable before release
    with gc.checkpoint_fence(f"ckpt-{step}"):  # each rank's fence is its own (tq_gc/publish/holders.py)
        save_checkpoint(...)              # starts once no delete batch is in flight; none starts until exit
    gc.close()

`holding` is make-before-break: the admission is durable before the block runs and released only after
it, so a reference handed to another source inside the block is in place before this one goes. A
background renewer keeps every held admission alive for as long as its block runs (long calls outlive
any TTL), and admits it again if the registry lost it (a Redis restarted empty): the rows were
protected until then by the collector's own bookkeeping, which a restarted Redis has lost as well.

It renews every `renew_seconds`: by default a third of the TTL, at most RENEW_MAX_SECONDS (10 s), so
that an admission a restarted Redis lost is back within 10 s whatever the TTL, well within the
shortest grace a sweeper allows without `allow_short_grace` (60 s; its first-seen records went with
the restart too). A sweeper with a shorter grace needs a shorter `renew_seconds`: a third of it. Where
the client can know the grace (a sidecar's registry: the sidecar's config), it keeps to that rule
itself: the default period is shortened to a third of the grace, and a longer one asked for is refused
(ValueError). On a Redis registry it cannot know the sweepers' grace: the rule is the caller's.

A sidecar (memory://) killed and started again under its name is found again by the clients made
before (tq_gc.sidecar.client.SidecarAdmissionBackend), and its empty registry gets every held
admission back at the next renewal: within renew_seconds, a third of its grace at most. It deletes
nothing before then: its first-seen records started empty with it, so no row is eligible for a whole
grace after its first sweep.

When the store is down (Redis, or the sidecar that hosts a memory:// registry), the job goes on and
nothing is deleted meanwhile. `holding` logs, runs its block and keeps the admission pending;
`checkpoint_fence` logs and runs its block with its fence pending. The renewer retries both every
RETRY_SECONDS (0.5 s) and writes them as soon as the store answers. Why no delete slips in: a sweeper's
lease, first-seen records and fences live in that same store, so while it is down no sweeper can renew
its lease or record the intent that precedes every delete batch (a sweep under way stops at its next
store call). Once the store is back, a new sweep must take the lease, read every source and list
before its first intent, which checks fences and admissions atomically, and a Redis that came back
empty lost the first-seen records too, so nothing is eligible before a whole grace; the pending writes
land within half a second. While the store is known to be down, new blocks do not wait for it (no
connect timeout per call): their first write is left to the renewer. What this cannot cover: a store
this process cannot reach but a sweeper can (a network partition: admissions written before it stay
protected for their TTL, rows written during it wait out a grace, a row adopted during it is
unprotected until its admission is written); a delete batch already clearing when the store went down
(it may end in the first seconds of a checkpoint that could not wait for it); and a release that
fails, which is not retried (the admission expires after its TTL: its rows are kept longer, never
shorter).

A store that answers but refuses this client (StoreRefused: a wrong password, an ACL user without
scripting, TLS, `maxclients`) is not down for everyone: the sweepers may reach it and delete. So
`holding` and `checkpoint_fence` raise StoreRefused before the block, and at its end if a renewal was
refused while it ran, unless the client was made with on_refused="continue" (then it is treated as down).

A renewal never holds up another block: each held admission has a lock of its own, held across its own
store calls only (the one block that ends waits for its own renewal under way, so that no renewal lands
after the release); the client's lock guards its table of blocks and is never held across a call.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Literal

from tq_gc.errors import StoreRefused, StoreUnavailable
from tq_gc.publish.registry import (
    DELETE_WAIT_SECONDS,
    RENEW_FRACTION,
    RETRY_SECONDS,
    AdmissionRegistry,
    checked_name,
    checked_rows,
    checked_ttl_ms,
    renew_period_seconds,
    store_down_policy,
)
from tq_gc.state.base import AdmissionRows

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 600.0
NOT_DUE = math.inf


@dataclass(eq=False)
class _Held:
    """One block's admission: written to the store (or pending), renewed until the block ends."""

    admission_id: str
    rows: AdmissionRows
    io: threading.Lock = field(default_factory=threading.Lock)  # this admission's store calls, one at a time
    written: bool = False  # the last write reached the store (False: pending, or lost)
    due_at: float = NOT_DUE  # monotonic time of the next renewal or retry
    ended: bool = False
    inherited: bool = False  # a block of the process this one was forked from: that one releases it
    refused: StoreRefused | None = None  # the first write the store refused while the block ran


class GcClient:
    """Admissions held for the duration of a block, renewed in the background, and checkpoint fences."""

    def __init__(
        self,
        registry: AdmissionRegistry,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        renew_seconds: float | None = None,
        on_refused: Literal["raise", "continue"] = "raise",
    ) -> None:
        checked_ttl_ms(ttl_seconds)
        self._on_refused = on_refused
        self._refused_go_on = store_down_policy(on_refused, "on_refused")
        self._registry = registry
        self._ttl_seconds = ttl_seconds
        self.renew_seconds = _renew_within_grace(
            _checked_renew_seconds(renew_seconds, ttl_seconds),
            asked=renew_seconds is not None,
            grace_seconds=registry.known_grace_seconds(),
        )
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()  # guards _held and _store_down; never held across a store call
        self._store_down = False  # the last store call failed: new blocks leave their write to the renewer
        self._stop = threading.Event()
        self._renewer = self._start_renewer()
        _CLIENTS.add(self)

    def _start_renewer(self) -> threading.Thread:
        renewer = threading.Thread(target=self._renew_forever, name="tq-gc-renewer", daemon=True)
        renewer.start()
        return renewer

    def _after_fork_in_child(self) -> None:
        """A fork copies this client but not its renewer thread: start one in the child. The locks may have
        been held by the parent's threads at the fork, so they are made afresh; the blocks held then are
        the parent's, which renews and releases them (a block the child goes on running ends without a
        release: the registry's holder identity is the child's own now, tq_gc/publish/holders.py). The
        child's store connections are its own: redis-py opens new ones in a process it was not made in."""
        self._lock = threading.Lock()
        for held in self._held.values():
            held.io, held.inherited, held.ended = threading.Lock(), True, True
        self._held = {}
        self._store_down = False
        if not self._stop.is_set():  # not closed before the fork
            self._renewer = self._start_renewer()

    @classmethod
    def connect(
        cls,
        url: str,
        namespace: str = "default",
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        renew_seconds: float | None = None,
        on_refused: Literal["raise", "continue"] = "raise",
    ) -> GcClient:
        """A client on the shared state store at `url`; close() closes the connection it opened."""
        _checked_renew_seconds(renew_seconds, ttl_seconds)  # checked before connecting
        store_down_policy(on_refused, "on_refused")
        return cls(AdmissionRegistry.connect(url, namespace), ttl_seconds, renew_seconds, on_refused)

    @contextmanager
    def holding(self, admission_id: str, rows: Mapping[str, Sequence[str]]) -> Iterator[str]:
        """Admit `rows` ({partition: [keys]}) before the block and release them after it.

        If the store is down the block runs all the same, its admission pending until the store is
        back (see the module's docstring). Raises ValueError on bad input, and if this client already
        holds `admission_id` (a nested block, another thread): admitting it again would replace the
        rows of the block holding it, and the first to end would release both. Give each block an id
        of its own.

        A store that answers but refuses this client (StoreRefused: a wrong password, an ACL user
        without scripting, maxclients, TLS) raises before the block runs, and at its end if a renewal
        was refused while it ran: the sweepers may reach that store, so the block would be
        unprotected. GcClient(on_refused="continue") treats a refusal as a store down instead."""
        held = self._claim(admission_id, rows)
        try:
            with held.io:  # the renewer leaves it alone until its first write is done
                self._first_write(held)
        except BaseException:
            self._unclaim(held)
            raise
        try:
            yield admission_id
        except BaseException:
            self._end(held)
            raise
        self._end(held)
        if held.refused is not None and not self._refused_go_on:
            raise held.refused

    def checkpoint_fence(
        self, name: str, ttl_seconds: float = 300.0, wait_seconds: float = DELETE_WAIT_SECONDS
    ) -> AbstractContextManager[str]:
        """No delete while the block runs; the block starts once no delete batch is in flight. The fence
        is renewed while the block runs; with the store down the block runs all the same, its fence
        raised as soon as the store is back (AdmissionRegistry.checkpoint_fence, on_store_down="continue")."""
        return self._registry.checkpoint_fence(
            name, ttl_seconds, wait_seconds, on_store_down="continue", on_refused=self._on_refused
        )

    def close(self) -> None:
        """Stop renewing and close the connection connect() opened. Held admissions expire by their TTL."""
        self._stop.set()
        self._renewer.join(timeout=5)
        self._registry.close()

    def __enter__(self) -> GcClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one block ---------------------------------------------------------------------------------

    def _claim(self, admission_id: str, rows: Mapping[str, Sequence[str]]) -> _Held:
        # Checked here, not at the first write: with the store down that is the renewer's.
        held = _Held(checked_name("admission_id", admission_id), checked_rows(rows))
        with self._lock:
            if admission_id in self._held:
                raise ValueError(
                    f"admission {admission_id!r} is already held by a block of this GcClient: nested or "
                    "concurrent blocks need ids of their own (the call id, the rank)"
                )
            self._held[admission_id] = held
        return held

    def _unclaim(self, held: _Held) -> None:
        with self._lock:
            if self._held.get(held.admission_id) is held:
                del self._held[held.admission_id]

    def _first_write(self, held: _Held) -> None:
        """Admit now; with the store down (or known down), leave it to the renewer. Bad input raises."""
        with self._lock:
            store_down = self._store_down
        if store_down:
            log.warning(
                "the tq-gc store is down: admission %r is pending, written as soon as it is back",
                held.admission_id,
            )
            held.due_at = time.monotonic()
            return
        try:
            self._registry.admit(held.admission_id, held.rows, self._ttl_seconds)
        except StoreUnavailable as exc:
            if isinstance(exc, StoreRefused) and not self._refused_go_on:
                raise
            self._saw_store(up=False)
            log.warning(
                "could not admit %r, the block goes on (the admission is retried every %g s): %s",
                held.admission_id,
                RETRY_SECONDS,
                exc,
            )
            held.due_at = time.monotonic() + RETRY_SECONDS
            return
        self._saw_store(up=True)
        held.written = True
        held.due_at = time.monotonic() + self.renew_seconds

    def _end(self, held: _Held) -> None:
        with held.io:  # after a renewal of this admission under way: none lands after the release
            held.ended = True
            with self._lock:
                store_down = self._store_down
            if held.inherited:
                log.info("admission %r was held at the fork: the parent releases it", held.admission_id)
            elif store_down and not held.written:
                log.warning(
                    "admission %r ended while the store was down; nothing to release", held.admission_id
                )
            else:
                self._release(held.admission_id)
        self._unclaim(held)

    def _release(self, admission_id: str) -> None:
        try:
            self._registry.release(admission_id)
        except StoreUnavailable as exc:  # the block's outcome stands; the admission expires by its TTL
            if not (isinstance(exc, StoreRefused) and not self._refused_go_on):
                self._saw_store(up=False)
            log.warning("could not release admission %r (it expires after its TTL): %s", admission_id, exc)

    def _saw_store(self, up: bool) -> None:
        with self._lock:
            was_down, self._store_down = self._store_down, not up
        if was_down and up:
            log.info("the tq-gc store answers again")

    # -- the renewer -------------------------------------------------------------------------------

    def _renew_forever(self) -> None:
        while not self._stop.wait(min(RETRY_SECONDS, self.renew_seconds)):
            self._renew_due(time.monotonic())

    def renew_all(self) -> None:
        """Renew every held admission now; admit again any the registry no longer has, or never had."""
        self._renew_due(NOT_DUE)

    def _renew_due(self, now: float) -> None:
        with self._lock:
            due = [held for held in self._held.values() if held.due_at <= now]
        for index, held in enumerate(due):
            if not self._renew(held, now):
                # The store is down: trying the others now would wait out a timeout each.
                for later in due[index + 1 :]:
                    later.due_at = min(later.due_at, time.monotonic() + RETRY_SECONDS)
                return

    def _renew(self, held: _Held, now: float) -> bool:
        """Renew (or write again) one admission; False if the store did not answer."""
        with held.io:
            if held.ended or held.due_at > now:
                return True
            was_written = held.written
            try:
                if not self._registry.renew(held.admission_id, self._ttl_seconds):
                    if was_written:
                        log.warning(
                            "admission %r was lost by the registry; admitting it again", held.admission_id
                        )
                    self._registry.admit(held.admission_id, held.rows, self._ttl_seconds)
            except Exception as exc:  # StoreUnavailable, or what a sidecar raised: retried all the same
                if isinstance(exc, StoreRefused) and not self._refused_go_on:
                    # No store down: new blocks still try their first write, and raise.
                    if held.refused is None:
                        log.error("the store refused admission %r (retrying): %s", held.admission_id, exc)
                        held.refused = exc
                else:
                    if was_written:
                        log.warning("could not renew admission %r (retrying): %s", held.admission_id, exc)
                    self._saw_store(up=False)
                held.written = False
                held.due_at = time.monotonic() + RETRY_SECONDS
                return False
            if not was_written:
                log.info("admission %r written (it was pending)", held.admission_id)
            held.written = True
            held.due_at = time.monotonic() + self.renew_seconds
        self._saw_store(up=True)
        return True


_CLIENTS: weakref.WeakSet[GcClient] = weakref.WeakSet()


def _restart_renewers_in_child() -> None:
    for client in list(_CLIENTS):
        client._after_fork_in_child()


os.register_at_fork(after_in_child=_restart_renewers_in_child)


def _renew_within_grace(renew_seconds: float, asked: bool, grace_seconds: float | None) -> float:
    """The renewal period, checked against the sweepers' grace where it is known: an admission a
    restarted store (or sidecar) lost must be back well within a grace, so renewals come at least every
    third of it (RENEW_FRACTION). A period asked for that is longer is refused; the default is shortened."""
    if grace_seconds is None:
        return renew_seconds
    at_most_seconds = grace_seconds * RENEW_FRACTION
    if renew_seconds <= at_most_seconds:
        return renew_seconds
    if asked:
        raise ValueError(
            f"renew_seconds {renew_seconds:g} is more than a third of the sweepers' grace "
            f"({grace_seconds:g} s): an admission the store lost would not be back in time. Use at most "
            f"{at_most_seconds:g}"
        )
    return at_most_seconds


def _checked_renew_seconds(renew_seconds: float | None, ttl_seconds: float) -> float:
    """renew_seconds as given, or renew_period_seconds(ttl_seconds). Refused unless positive and at most
    half the TTL: a renewal must be able to fail once before the admission lapses."""
    if renew_seconds is None:
        return renew_period_seconds(ttl_seconds)
    if isinstance(renew_seconds, bool) or not isinstance(renew_seconds, int | float):
        raise ValueError(f"renew_seconds must be a number of seconds, got {renew_seconds!r}")
    if not math.isfinite(renew_seconds) or renew_seconds <= 0 or renew_seconds > ttl_seconds / 2:
        raise ValueError(
            f"renew_seconds must be positive and at most half of ttl_seconds ({ttl_seconds:g}), got "
            f"{renew_seconds!r}: a third of the shortest grace of the sweepers is a good value"
        )
    return float(renew_seconds)
