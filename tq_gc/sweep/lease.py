"""The sweep's lease on its namespace (one sweeper at a time): taken first, renewed by the re-check
before each delete batch and in the background while the sweep attaches and lists, checked fresh right
before each clear, released at the end. Every write a sweep makes names its lease: once the lease is
gone, the sweeper writes nothing more.

A lease that survives an outage of its store is not enough: a Redis that comes back with its data (an
append-only file, a failover to a replica) still holds it, but publishers could not admit while it was
away, so their moves are in no write barrier. A renewal that failed, or a store that answers from another
server process than when the lease was taken, ends the sweep's deletes (StoreInterrupted)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

from tq_gc.config import Config
from tq_gc.errors import FenceUp, LeaseHeld, LeaseLost, StoreInterrupted, SweeperPaused
from tq_gc.state.base import Recheck, StateStore
from tq_gc.sweep.run import SweepRun

log = logging.getLogger(__name__)

# The lease's time to live, fixed: a third of it between background renewals, so two can fail in a row
# before it lapses; a crashed sweeper blocks the next one for at most this long (a CronJob's next run, 5
# minutes later, finds it free). Tests hand the collector a shorter one (Collector's lease_ttl_seconds).
LEASE_TTL_SECONDS = 60.0
# The lease is renewed in the background every third of its TTL (BackgroundRenewal): two renewals can fail
# in a row before it lapses, and a long attach or listing (a million rows) never outlasts it.
RENEW_FRACTION = 1 / 3
# Right before a clear, the last renewal must be younger than this fraction of the TTL (monotonic clock):
# a sweeper paused between its re-check and its clear (SIGSTOP, a long GC pause) stops instead.
CLEAR_WITHIN_TTL_FRACTION = 1 / 2


def default_holder() -> str:
    """The lease holder's name when none is given: this host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


class SweepLease:
    """What a sweep does with its lease. The lease itself, and when the sweeping thread last renewed
    it, are the run's (SweepRun.lease, SweepRun.renewed_at)."""

    def __init__(
        self, config: Config, state: StateStore, holder: str, ttl_seconds: float = LEASE_TTL_SECONDS
    ) -> None:
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self.ttl_ms = int(ttl_seconds * 1000)
        self._config = config
        self._state = state

    def take(self, run: SweepRun) -> None:
        """Take the lease (LeaseHeld if another sweeper has it), then re-check: no fence may be up
        (FenceUp), and the fence epoch now is the one every delete batch's re-check must find."""
        lease = self._state.acquire_lease(self.holder, self.ttl_ms)
        if lease is None:
            holder = self._state.lease_holder()
            raise LeaseHeld(holder.holder if holder else "another sweeper")
        run.lease, run.started_ms = lease, lease.expires_at_ms - self.ttl_ms
        check = self.recheck(run)
        stop_if_fenced(check.fences)
        run.fence_epoch, run.server_run = check.fence_epoch, check.server_run

    def recheck(self, run: SweepRun) -> Recheck:
        """Renew the lease (LeaseLost if it is gone) and read fences and the admissions version, on the
        sweeping thread: what it reads here vouches for its next clear (check_fresh)."""
        started = time.monotonic()
        check = self.renew(run)
        run.renewed_at = started
        return check

    def renew(self, run: SweepRun) -> Recheck:
        """Renew the lease, and with it a delete batch's in-flight mark (LeaseLost if it is gone;
        StoreInterrupted if the store was away or restarted since the lease was taken). The background
        renewals come here only: they vouch for nothing the sweeping thread read."""
        check = self._state.recheck(run.held_lease, self.ttl_ms)
        if check.lease is None:
            raise LeaseLost(self._config.namespace)
        run.lease = check.lease
        if run.server_run and check.server_run != run.server_run:
            run.interrupted = run.interrupted or (
                f"it restarted or failed over: server run {check.server_run or 'unknown'}, "
                f"was {run.server_run}"
            )
        if run.interrupted is not None:
            raise StoreInterrupted(run.interrupted)
        return check

    def check_fresh(self, run: SweepRun) -> None:
        """Right before a clear: were we paused since the renewal? The store would not tell us in time."""
        elapsed = time.monotonic() - run.renewed_at
        if elapsed > self.ttl_seconds * CLEAR_WITHIN_TTL_FRACTION:
            raise SweeperPaused(elapsed)

    def renewed_in_background(self, run: SweepRun) -> BackgroundRenewal:
        """The thread that keeps the run's lease renewed (not started yet). A renewal that fails marks
        the run interrupted: the store was away, so its next re-check ends the deletes."""

        def failed(exc: Exception) -> None:
            run.interrupted = run.interrupted or f"a lease renewal failed: {exc}"

        every_seconds = self.ttl_seconds * RENEW_FRACTION
        return BackgroundRenewal(lambda: self.renew(run), every_seconds, failed)

    def release(self, run: SweepRun) -> None:
        """Give the lease back at the end of the sweep, if it took one; if that fails, it expires."""
        if run.lease is not None:
            try:
                self._state.release_lease(run.lease)
            except Exception as exc:
                log.warning("could not release the lease (it expires by itself): %s", exc)


def stop_if_fenced(fences: Mapping[str, int]) -> None:
    """FenceUp if a re-check found checkpoint fences up ({name: expires_at_ms})."""
    if fences:
        raise FenceUp(fences)


class BackgroundRenewal:
    """Renews a sweep's lease in the background, from when it is taken until the sweep ends: attaching
    to a busy cluster or listing a million rows in paced windows can take longer than the TTL. A paused
    process renews nothing (the thread pauses with it), so a sweeper frozen past its TTL still loses the
    lease and fences itself; a renewal that finds the lease gone ends the renewals, and the sweep's next
    write fails on the token. A renewal that fails otherwise is reported to `failed` (the sweep deletes
    nothing more) and retried: the lease kept lets the sweep record how it ended."""

    def __init__(
        self, renew: Callable[[], object], every_seconds: float, failed: Callable[[Exception], None]
    ) -> None:
        self._renew = renew
        self._failed = failed
        self._every_seconds = every_seconds
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._keep, name="tq-gc-lease-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _keep(self) -> None:
        while not self._stopped.wait(self._every_seconds):
            try:
                self._renew()
            except StoreInterrupted:  # renewed all the same: the sweep's next re-check stops it
                continue
            except LeaseLost:
                return
            except Exception as exc:  # the store was away: no more deletes this sweep; keep the lease
                self._failed(exc)
                log.warning("could not renew the sweep lease (retrying; no more deletes this sweep): %s", exc)
