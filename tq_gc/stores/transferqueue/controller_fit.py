"""What the controller probe found at attach (internals.controller_probe): which TransferQueue the
controller runs, and which of the functions tq-gc runs inside it fit it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tq_gc.stores.transferqueue.controller_function import ControllerFunction
from tq_gc.stores.transferqueue.internals import CONTROLLER_FUNCTIONS, READ_FROM


@dataclass(frozen=True)
class ControllerFit:
    """What controller_probe() found: the controller's TQ version (None: unknown), the request types its
    loop decodes (None: unknown), and why each controller function does not fit ({name: reason}; absent:
    it fits)."""

    tq_version: str | None
    request_types: frozenset[str] | None
    misfits: dict[str, str]
    unknown_because: str | None = None

    @classmethod
    def from_probe(cls, found: dict[str, Any]) -> ControllerFit:
        types = found.get("request_types")
        version = found.get("tq_version")
        return cls(
            tq_version=version if isinstance(version, str) else None,
            request_types=None if types is None else frozenset(str(t) for t in types),
            misfits={name: str(found[name]) for name in CONTROLLER_FUNCTIONS if found.get(name) is not None},
        )

    @classmethod
    def unknown(cls, reason: str) -> ControllerFit:
        """The probe itself failed: nothing known, every function tried (each falls back on its first
        misfit)."""
        return cls(None, None, {}, reason)

    def describe(self) -> str:
        """One line for `tq-gc check`: each controller function, fitting or not."""
        if self.unknown_because is not None:
            return f"the controller could not be probed ({self.unknown_because}): each function is tried"
        parts = []
        for name in CONTROLLER_FUNCTIONS:
            reason = self.misfits.get(name)
            parts.append(
                f"{name}: fit"
                if reason is None
                else f"{name}: not available on this TransferQueue ({reason})"
            )
        version = self.tq_version or "unknown"
        return f"TransferQueue {version} (read from {', '.join(READ_FROM)}); " + "; ".join(parts)


def skip_misfits(fit: ControllerFit, functions: Mapping[str, ControllerFunction]) -> None:
    """Never try a function the probe found does not fit: TQ's own call from the start."""
    for name, reason in fit.misfits.items():
        function = functions.get(name)
        if function is not None:
            function.does_not_fit(name, f"found at attach: {reason}")


def fit_since(fit: ControllerFit | None, functions: Mapping[str, ControllerFunction]) -> ControllerFit:
    """The fit found at attach, with the misfits the functions found since (each on its first failure)."""
    fit = fit or ControllerFit(None, None, {})
    found_since = {
        name: function.misfit
        for name, function in functions.items()
        if function.misfit is not None and name not in fit.misfits
    }
    return ControllerFit(fit.tq_version, fit.request_types, {**fit.misfits, **found_since})
