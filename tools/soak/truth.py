"""The checker's ground truth: every staging row the soak wrote, who references it, and since when it
is an orphan. Bookkeeping only, no I/O: the actors tell it what they did, the checker asks it.

A row's life: created (a holder added before it is written: make-before-break), written, moved between
holders any number of times, then its last holder dropped (an orphan from then on, never referenced
again). A leaked row is an orphan from its write; an abandoned admission's row from its lease's expiry.

"Deleted while referenced" needs no timing guesswork: a row referenced at two moments was referenced
in between (holders are added before old ones go, and an orphan stays one), so a row missing from TQ
while referenced, checked twice around the listing with the same `epoch`, was deleted by a sweeper.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

ADMISSION, TAG, MANIFEST = "admission", "tag", "manifest"


@dataclass(frozen=True, order=True)
class Holder:
    kind: str  # ADMISSION, TAG or MANIFEST
    name: str  # admission id, rollout_data key, or manifest path


@dataclass
class RowRecord:
    key: str
    origin: str  # published, leaked, abandoned
    written: bool = False
    holders: set[Holder] = field(default_factory=set)
    # Bumped whenever the row stops (or starts again) being referenced: the checker's "same state" test.
    epoch: int = 0
    referenced_until_s: float | None = None  # an abandoned admission: referenced until about its expiry
    orphan_since_s: float | None = None
    history: list[str] = field(default_factory=list)
    moves: list[tuple[float, str]] = field(default_factory=list)  # (at_s, "admission->tag")

    def referenced(self, now_s: float) -> bool:
        if self.referenced_until_s is not None:
            return now_s < self.referenced_until_s
        return bool(self.holders)


@dataclass(frozen=True)
class Violation:
    key: str
    at_s: float
    detected_by: str
    last_move: str  # "admission->tag", or "none" for a row never moved
    since_last_move_s: float | None
    history: tuple[str, ...]

    @property
    def lapsed(self) -> bool:
        """The row's publisher renewed an admission too late at some point: the soak's own fault."""
        return any("LAPSE" in line for line in self.history)

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "at_s": round(self.at_s, 2),
            "detected_by": self.detected_by,
            "lapsed": self.lapsed,
            "last_move": self.last_move,
            "since_last_move_s": None if self.since_last_move_s is None else round(self.since_last_move_s, 2),
            "history": list(self.history),
        }


class GroundTruth:
    """Thread-safe. Times are seconds since the soak started (monotonic)."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._started_unix = time.time()
        self._lock = threading.Lock()
        self._rows: dict[str, RowRecord] = {}
        self._violations: dict[str, Violation] = {}
        self.moves = Counter[str]()

    def now_s(self) -> float:
        return time.monotonic() - self._started

    def unix(self, at_s: float) -> float:
        """A time of this soak as Unix seconds (what sweep reports carry)."""
        return self._started_unix + at_s

    def _note(self, row: RowRecord, text: str) -> None:
        row.history.append(f"t={self.now_s():.2f} {text}")

    # -- what actors report ---------------------------------------------------------------------------

    def new_row(self, key: str, origin: str) -> None:
        with self._lock:
            assert key not in self._rows, key
            self._rows[key] = RowRecord(key, origin)
            self._note(self._rows[key], f"created ({origin})")

    def written(self, key: str) -> None:
        with self._lock:
            row = self._rows[key]
            row.written = True
            self._note(row, "written to TQ")
            if row.origin == "leaked":
                row.orphan_since_s = self.now_s()

    def add_holder(self, key: str, holder: Holder) -> None:
        with self._lock:
            row = self._rows[key]
            assert row.orphan_since_s is None, f"{key} is an orphan: it is never referenced again"
            if not row.holders:
                row.epoch += 1
            row.holders.add(holder)
            self._note(row, f"+{holder.kind}:{holder.name}")

    def remove_holder(self, key: str, holder: Holder) -> None:
        """Drop one holder of several (a move's break step); the last goes through drop_last_holder."""
        with self._lock:
            row = self._rows[key]
            row.holders.discard(holder)
            assert row.holders, f"{key}: the last holder goes through drop_last_holder"
            self._note(row, f"-{holder.kind}:{holder.name}")

    def note(self, key: str, text: str) -> None:
        with self._lock:
            self._note(self._rows[key], text)

    def moved(self, key: str, source: str, target: str) -> None:
        with self._lock:
            move = f"{source}->{target}"
            self._rows[key].moves.append((self.now_s(), move))
            self.moves[move] += 1

    def drop_last_holder(self, key: str, holder: Holder) -> None:
        """Called before the last reference is removed: from here on the row is not held as referenced."""
        with self._lock:
            row = self._rows[key]
            row.holders.discard(holder)
            row.epoch += 1
            self._note(row, f"dropping last holder {holder.kind}:{holder.name}")

    def keep_last_holder(self, key: str, holder: Holder) -> None:
        """The last reference could not be removed after all (e.g. no fence): the row stays referenced."""
        self.add_holder(key, holder)

    def orphaned(self, key: str, since_s: float | None = None) -> None:
        with self._lock:
            row = self._rows[key]
            row.orphan_since_s = self.now_s() if since_s is None else since_s
            self._note(row, f"orphan since t={row.orphan_since_s:.2f}")

    def abandoned(self, key: str, referenced_until_s: float, orphan_since_s: float) -> None:
        """An admission that will never be renewed: referenced until `referenced_until_s` (a little
        before its lease can expire), an orphan from `orphan_since_s` (when it surely has)."""
        with self._lock:
            row = self._rows[key]
            row.referenced_until_s, row.orphan_since_s = referenced_until_s, orphan_since_s
            row.holders.clear()
            self._note(row, f"abandoned: referenced until t={referenced_until_s:.2f}")

    # -- what the checker asks ------------------------------------------------------------------------

    def referenced_rows(self) -> dict[str, int]:
        """{key: epoch} of every written row referenced now."""
        now_s = self.now_s()
        with self._lock:
            return {k: r.epoch for k, r in self._rows.items() if r.written and r.referenced(now_s)}

    def still_referenced(self, key: str, epoch: int) -> bool:
        with self._lock:
            row = self._rows[key]
            return row.epoch == epoch and row.referenced(self.now_s())

    def violation(self, key: str, detected_by: str) -> Violation | None:
        """Record that `key` is gone while referenced; None if it was recorded already."""
        now_s = self.now_s()
        with self._lock:
            if key in self._violations:
                return None
            row = self._rows[key]
            self._note(row, f"MISSING from TQ while referenced ({detected_by})")
            last_at, last_move = row.moves[-1] if row.moves else (None, "none")
            found = Violation(
                key,
                now_s,
                detected_by,
                last_move,
                None if last_at is None else now_s - last_at,
                tuple(row.history),
            )
            self._violations[key] = found
            return found

    def violations(self) -> list[Violation]:
        with self._lock:
            return sorted(self._violations.values(), key=lambda v: v.at_s)

    def orphans_since(self, before_s: float) -> set[str]:
        """Written orphans that have been orphans since before `before_s`."""
        with self._lock:
            return {
                k
                for k, r in self._rows.items()
                if r.written and r.orphan_since_s is not None and r.orphan_since_s <= before_s
            }

    def last_orphaned_s(self) -> float:
        """When the newest orphan became one (0 if none has)."""
        with self._lock:
            return max((r.orphan_since_s or 0.0 for r in self._rows.values() if r.written), default=0.0)

    def counts(self) -> Counter[str]:
        now_s = self.now_s()
        with self._lock:
            rows = [r for r in self._rows.values() if r.written]
            return Counter(
                "referenced" if r.referenced(now_s) else "orphan" if r.orphan_since_s is not None else "other"
                for r in rows
            )
