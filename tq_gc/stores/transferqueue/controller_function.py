"""Read-only functions run on the job's TransferQueue controller, beside its request thread.

TQ 0.1.11 has no bounded request for some of what tq-gc reads (a partition's global indexes), and its
requests take turns with the job's on one thread. Ray runs a function on an actor (`__ray_call__`, a Ray
DeveloperAPI): tq-gc ships small closures (their code by value, so the controller's process need not
have tq-gc installed) that read TQ's own bookkeeping and never write it. Another TQ version may lay that
bookkeeping out otherwise: a function that fails so inside the controller (AttributeError, TypeError,
KeyError, NameError; Ray re-raises it as a RayTaskError that is also one of these) does not fit, and
its caller uses TQ's own calls from then on, after one warning. So does one that the probe at attach
(internals.controller_probe) finds does not fit. Each misfit found is counted by function, for the
metric tqgc_tq_controller_function_misfits_total.

A function may wait first, in the same call (`Before`: the wait for the controller's quiet moment,
quiet.py), rather than in a call of its own: one round trip where two were, and the function runs as
soon as the wait is over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from tq_gc.errors import StoreUnavailable
from tq_gc.stores.transferqueue.requests import TqRequests

# What a function that does not fit the controller raises inside it.
MISFITS = (AttributeError, TypeError, KeyError, NameError)


class MisfitCounts:
    """How many times each controller function was found not to fit, in this process (thread-safe). The
    metrics read it; nothing resets it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, function: str) -> None:
        with self._lock:
            self._counts[function] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


MISFITS_FOUND = MisfitCounts()


class DoesNotFit(Exception):
    """The function does not fit this controller: use TQ's own call instead."""


class Before(Protocol):
    """What a function waits for on the controller before it runs, in the same call."""

    def first(self, function: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
        """The function run in its place, called with args() before the function's own arguments, and
        answering (what the wait answered, the function's answer)."""
        ...

    def args(self) -> Any:
        """The wait's arguments for the next call."""
        ...

    def took(self, waited: Any) -> float:
        """The seconds the wait took, from what it answered."""
        ...


class ControllerFunction:
    """One function run on the controller, named `name` (internals.CONTROLLER_FUNCTIONS), timed under
    `op` (None: untimed), after `before` if given, in the same call; `fits` until it has failed as a
    misfit, or the probe at attach found it does not fit (`does_not_fit`)."""

    def __init__(
        self,
        requests: TqRequests,
        controller: Any,
        op: str | None,
        name: str,
        function: Callable[..., Any],
        instead: str,
        log: logging.Logger,
        before: Before | None = None,
    ) -> None:
        self._requests = requests
        self._controller = controller
        self._op = op
        self.name = name
        self._function = function if before is None else before.first(function)
        self._before = before
        self._instead = instead  # what the caller does instead, for the warning
        self._log = log
        self.fits = True
        self.misfit: str | None = None  # why it does not fit, once it does not

    def __call__(self, what: str, *args: Any) -> tuple[Any, float]:
        """(the function's answer for `args`, the seconds the call took less the wait before it).
        DoesNotFit if it does not fit (warned the first time), StoreUnavailable if the controller gives
        no answer."""
        if not self.fits:
            raise DoesNotFit(what)
        before = self._before
        if before is not None:
            args = (before.args(), *args)
        started = time.perf_counter()
        waited_seconds = 0.0
        try:
            answer = self._requests.actor_call(
                None, what, self._controller, "__ray_call__", self._function, *args
            )
            if before is not None:
                waited, answer = answer
                waited_seconds = before.took(waited)
            return answer, time.perf_counter() - started - waited_seconds
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, MISFITS):
                raise
            self.does_not_fit(what, exc.__cause__)
            raise DoesNotFit(what) from exc
        finally:
            if self._op is not None:
                self._requests.log.record(self._op, time.perf_counter() - started - waited_seconds)

    def does_not_fit(self, what: str, cause: object) -> None:
        """Stop calling the function: it failed as a misfit, or the probe found it would (warned here,
        once, and counted)."""
        if not self.fits:
            return
        self.fits = False
        self.misfit = str(cause)
        MISFITS_FOUND.add(self.name)
        self._log.warning(
            "reading the %s on the TransferQueue controller does not fit it (%s): another TQ version? %s",
            what,
            cause,
            self._instead,
        )
