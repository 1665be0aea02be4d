"""What the soak's actor threads (publishers, the leaker, the checker, the chaos) share with its driver:
the switches that start and stop them, the count of Redis restarts, their timing and a publisher's pace."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from .truth import ADMISSION, MANIFEST, TAG

KINDS = (ADMISSION, TAG, MANIFEST)


@dataclass
class ActorSwitches:
    """Set by the soak's driver: `chaos` off stops moves and leaks (references are kept and renewed);
    `stop` ends the thread."""

    chaos: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    # Set while the job checkpoints: manifests change (under fences) only then, as in a real job,
    # which checkpoints every so often; between checkpoints, sweeps have fence-free stretches to delete in.
    checkpointing: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


@dataclass
class RedisRestarts:
    """How many times the chaos restarted Redis: tells a lease lost to a restart from a late renew."""

    count: int = 0


@dataclass
class Timing:
    admission_ttl_seconds: float
    renew_every_s: float
    fence_ttl_s: float
    tick_s: float  # the leaker's pace


@dataclass(frozen=True)
class Pace:
    """How a publisher behaves: one create, move or retire per `tick_s`; `rows_held` rows at a time,
    each moved `moves_per_row` times (a range) before it is retired; moves between `kinds`. With
    `switch_kind` every move goes to another kind (a hot row flips admission <-> tag back to back).
    With `fenced_manifests` manifests change only while the job checkpoints, under its fence; without,
    at any time, each move inside the admission the protocol asks for."""

    tick_s: float
    rows_held: int
    moves_per_row: tuple[int, int]
    kinds: tuple[str, ...] = KINDS
    switch_kind: bool = False
    fenced_manifests: bool = True

    def next_kind(self, rng: random.Random, current: str, manifests: bool = True) -> str:
        """The kind of a row's next reference; a manifest only when `manifests` (a checkpoint is on)."""
        kinds = [kind for kind in self.kinds if manifests or kind != MANIFEST]
        if self.switch_kind:
            return rng.choice([kind for kind in kinds if kind != current])
        return rng.choice(kinds)
