"""Quiet moments of the job's TransferQueue controller: tq-gc makes each of its requests in one.

The job's requests take turns with tq-gc's on the controller's request thread, and share its process's
GIL and the node's cores with them. A job step's requests come in bursts with short gaps between them. A
request of tq-gc's that lands in a burst delays the rest of it; one made after the request thread has
been idle for a while lands between steps, and is done before the next. So before each request (a
listing window, a delete batch) tq-gc waits until the request thread has been idle `quiet_seconds`, or
`max_wait_seconds` at most: on a controller that is never that idle, it goes on at that pace, the duty cycle
still bounding its share.

The wait runs on the controller's actor thread (`__ray_call__`, controller_function.py), beside the
request thread, and reads only which function that thread is in (`sys._current_frames()`): idle is
waiting in pyzmq's `recv_multipart` inside TQ's request loop (`_process_request_loop` in 0.1.10 and
0.1.11, `_process_request` in 0.1.9: internals.py); the same frame object over the whole
quiet time means no request was served meanwhile (a look every few milliseconds could miss a short one;
a new frame per request cannot be missed). Each look takes the controller's interpreter lock, so the
wait looks every 5 ms: often enough to find the gaps, rarely enough that the looks themselves do not
slow the job. Where the controller has no such thread or loop (another TQ version: the probe at attach,
or the wait itself, finds out) the wait does not fit: one warning, and requests go without waiting.

An idle job is told apart from a job between two bursts: the request thread's loop keeps the request it
served last, whose id and sender the wait reads. While that stays the request seen at tq-gc's previous
quiet moment, or is one of tq-gc's own (its client's id), the job has made none since. A job that has
made none for JOB_IDLE_SECONDS (longer than any gap between a step's bursts) is idle: the wait returns at
its first look, and the store's requests go in whole batches with no duty cycle's pause, at the naive
clear's pace. The job's first request after that finds at most one batch of tq-gc's in progress; the
next wait sees that request and the pacing is back.

A request that is itself a function run on the controller (an index page, a key window) waits inside
its own call (`QuietMoments.first`): no call of the wait's own before it, and it starts as soon as the
quiet moment is found rather than a round trip later.

The measurements behind the quiet time, the look interval and the in-call wait are in
docs/performance.md ("Cost to the training job").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tq_gc.stores.transferqueue.controller_function import MISFITS, ControllerFunction, DoesNotFit
from tq_gc.stores.transferqueue.internals import QUIET_WAITS, RequestThreadWatch, request_thread_watch
from tq_gc.stores.transferqueue.pacing import JOB_IDLE_MS
from tq_gc.stores.transferqueue.requests import WAIT_QUIET, TqRequests

logger = logging.getLogger(__name__)

# How long the controller's request thread must have been idle. Within a job step its gaps were under
# 10 ms here (10 ms of quiet did not help, above); 20 ms leaves a margin for a slower node.
QUIET_SECONDS = 0.020
# The longest wait for one: on a controller never that idle, tq-gc still makes 4 requests a second.
QUIET_MAX_WAIT_SECONDS = 0.250
# How often the wait looks at the request thread (each look takes the controller's GIL; see above).
QUIET_SAMPLE_SECONDS = 0.005
JOB_IDLE_SECONDS = JOB_IDLE_MS / 1000  # an idle job (pacing.py)

# A wait's answer from inside another function's call on the controller (see request_thread_watch), the
# text of its error where it does not fit the controller, or None when it did not run.
_WatchAnswer = tuple[float, bool, str | None, float]
_InCallAnswer = _WatchAnswer | str | None
_WaitArgs = tuple[float, float, float, tuple[str | None, str, float, float]]


@dataclass(frozen=True)
class QuietSettings:
    """Wait for `quiet_seconds` of the request thread's idleness before each request, `max_wait_seconds`
    at most; quiet_seconds 0: never wait. `watch`: the function that watches the request thread on the
    controller (default internals.request_thread_watch()). `job_idle_seconds`: how long the job must have
    made no request for tq-gc to go at once (JOB_IDLE_SECONDS)."""

    quiet_seconds: float = QUIET_SECONDS
    max_wait_seconds: float = QUIET_MAX_WAIT_SECONDS
    watch: RequestThreadWatch | None = None
    job_idle_seconds: float = JOB_IDLE_SECONDS

    def __post_init__(self) -> None:
        if self.quiet_seconds < 0 or self.max_wait_seconds <= 0:
            raise ValueError(
                "need quiet_seconds >= 0 and max_wait_seconds > 0, "
                f"got {self.quiet_seconds}, {self.max_wait_seconds}"
            )


@dataclass(frozen=True)
class QuietWait:
    """One wait for a quiet moment: how long it took, and whether it found one."""

    waited_seconds: float
    found: bool  # the request thread was idle quiet_seconds (else the wait ran out, or there was none)
    job_idle: bool = False  # the job had made no request for job_idle_seconds


NO_WAIT = QuietWait(0.0, False)


class QuietMoments:
    """Waits for the controller's quiet moments (quiet.quiet_seconds > 0), in a call of its own (`wait`) or
    inside a function's call on the controller (the `Before` of a ControllerFunction); after a misfit
    (warned once), waits no more."""

    WHAT = "request thread's state"

    def __init__(
        self, controller: Any, requests: TqRequests, settings: QuietSettings = QuietSettings()
    ) -> None:
        self._settings = settings
        self._log = requests.log
        self._own_sender = str(getattr(requests.client, "client_id", ""))
        # The request the thread had served last at the latest quiet moment, and since when (this
        # process's clock) the job had made none: the job's idleness goes on while the thread serves
        # nothing but tq-gc's own requests.
        self._served_last: str | None = None
        self._job_idle_since: float | None = None
        self.last = NO_WAIT
        self._watch = settings.watch or request_thread_watch()
        self._wait = ControllerFunction(
            requests,
            controller,
            None,
            QUIET_WAITS,
            self._watch,
            "Making requests without waiting for a quiet moment from now on",
            logger,
        )

    @property
    def function(self) -> ControllerFunction:
        return self._wait

    @property
    def fits(self) -> bool:
        """The wait fits the controller: requests wait for quiet moments."""
        return self._wait.fits

    def wait(self) -> QuietWait:
        args = self.args()
        if args is None:
            self.last = NO_WAIT
            return NO_WAIT
        started = time.perf_counter()
        try:
            answer, _ = self._wait(self.WHAT, *args)
        except DoesNotFit:
            self.last = NO_WAIT
            return NO_WAIT
        finally:
            self._log.waited(WAIT_QUIET, time.perf_counter() - started)
        return self._answered(answer)

    # ---- Before: the wait inside a function's call ----

    def first(self, function: Callable[..., Any]) -> Callable[..., tuple[_InCallAnswer, Any]]:
        """The function run on the controller in place of `function`: the wait (its arguments first, or
        None for none), then `function`, in one call. A wait that does not fit answers its error's text,
        and the function runs all the same: it may fit where the wait does not."""
        watch = self._watch

        def in_quiet_moment(controller: Any, wait_args: _WaitArgs | None, *args: Any) -> Any:
            waited: _InCallAnswer = None
            if wait_args is not None:
                try:
                    waited = watch(controller, *wait_args)
                except MISFITS as exc:  # shipped with the closure, by value
                    waited = f"{type(exc).__name__}: {exc}"
            return waited, function(controller, *args)

        return in_quiet_moment

    def args(self) -> _WaitArgs | None:
        """The wait's (quiet_seconds, max_wait_seconds, sample_seconds, the job's idleness as
        request_thread_watch takes it); None once it has not fit."""
        if not self.fits:
            return None
        since = self._job_idle_since
        idle_seconds = 0.0 if since is None else time.monotonic() - since
        idle = (self._served_last, self._own_sender, idle_seconds, self._settings.job_idle_seconds)
        return self._settings.quiet_seconds, self._settings.max_wait_seconds, QUIET_SAMPLE_SECONDS, idle

    def took(self, waited: _InCallAnswer) -> float:
        """The seconds a wait inside a function's call took (recorded as the store's pacing)."""
        if isinstance(waited, str):
            self._wait.does_not_fit(self.WHAT, waited)
            self.last = NO_WAIT
            return 0.0
        self.last = NO_WAIT if waited is None else self._answered(waited)
        seconds = self.last.waited_seconds
        self._log.waited(WAIT_QUIET, seconds)
        return seconds

    def _answered(self, answer: _WatchAnswer) -> QuietWait:
        """Keep what a wait found of the job's idleness (for the next wait), and say it."""
        waited_seconds, found, served_last, idle_seconds = answer
        if found and served_last is not None:
            self._served_last, self._job_idle_since = served_last, time.monotonic() - float(idle_seconds)
        else:
            self._served_last, self._job_idle_since = None, None
        job_idle = bool(found) and float(idle_seconds) >= self._settings.job_idle_seconds
        self.last = QuietWait(float(waited_seconds), bool(found), job_idle)
        return self.last
