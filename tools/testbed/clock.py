"""A clock for tests, to hand to MemoryState(clock_ms=...): returns ms, moves only when told to."""

from __future__ import annotations


class ManualClock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += round(seconds * 1000)
