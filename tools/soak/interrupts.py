"""How SIGTERM and Ctrl-C end the soak: noted as an error, acted on at the soak's next check."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def terminated_cleanly(errors: list[str]) -> Iterator[None]:
    """SIGTERM and Ctrl-C end the soak at its next check (within a second once the chaos is on), which
    unwinds like any failure and stops every process the soak started. Not at once: an interrupt raised
    inside a Ray call can abort the process in Ray's core worker and leave its Ray head and Redis
    running."""

    def note(signum: int, frame: FrameType | None) -> None:
        errors.append(f"interrupted ({signal.Signals(signum).name})")

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
