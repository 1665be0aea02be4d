"""Read-only functions run on the job's TransferQueue controller, beside its request thread.

TQ 0.1.11 has no bounded request for some of what tq-gc reads (a partition's global indexes), and its
requests take turns with the job's on one thread. Ray runs a function on an actor (`__ray_call__`, a Ray
DeveloperAPI): tq-gc ships small closures (their code by value, so the controller's process need not
have tq-gc installed) that read TQ's own bookkeeping and never write it. Another TQ version may lay that
bookkeeping out otherwise: a function that fails so inside the controller (AttributeError, TypeError,
KeyError, NameError; Ray re-raises it as a RayTaskError that is also one of these) does not fit, and
its caller uses TQ's own calls from then on, after one warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tq_gc.errors import StoreUnavailable
from tq_gc.stores.tq_requests import TqRequests

# What a function that does not fit the controller raises inside it.
MISFITS = (AttributeError, TypeError, KeyError, NameError)


class DoesNotFit(Exception):
    """The function does not fit this controller: use TQ's own call instead."""


class ControllerFunction:
    """One function run on the controller, timed under `op` (None: untimed); `fits` until it has failed as a
    misfit."""

    def __init__(
        self,
        requests: TqRequests,
        controller: Any,
        op: str | None,
        function: Callable[..., Any],
        instead: str,
        log: logging.Logger,
    ) -> None:
        self._requests = requests
        self._controller = controller
        self._op = op
        self._function = function
        self._instead = instead  # what the caller does instead, for the warning
        self._log = log
        self.fits = True

    def __call__(self, what: str, *args: Any) -> Any:
        """The function's answer for `args`. DoesNotFit if it does not fit (warned the first time),
        StoreUnavailable if the controller gives no answer."""
        if not self.fits:
            raise DoesNotFit(what)
        try:
            return self._requests.actor_call(
                self._op, what, self._controller, "__ray_call__", self._function, *args
            )
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, MISFITS):
                raise
            self.fits = False
            self._log.warning(
                "reading the %s on the TransferQueue controller failed (%s): another TQ version? %s",
                what,
                exc.__cause__,
                self._instead,
            )
            raise DoesNotFit(what) from exc
