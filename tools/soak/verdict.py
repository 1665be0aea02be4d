"""The soak's verdict: what was lost, what was left, how the sweeps went; and its one line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .journal_checks import JournalTally
from .settings import SoakSettings
from .sweepers import SweepTally
from .truth import Violation


@dataclass
class Verdict:
    settings: SoakSettings
    violations: list[Violation]
    overdue: list[str]
    reclaimed: int
    tally: SweepTally
    errors: list[str]
    journal: JournalTally
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> list[Violation]:
        """Rows deleted while referenced, but for those whose admission the soak itself let lapse."""
        return [v for v in self.violations if not v.lapsed]

    @property
    def passed(self) -> bool:
        return not self.failures()

    def failures(self) -> list[str]:
        """Why the soak failed, if it did: something referenced lost, something overdue, or no rows
        deleted while references moved (without deletes during the chaos, "nothing lost" would not have
        been put to the test), a journalled listing that differed from the full one after it, or none
        compared (the journal's equivalence not put to the test), or the soak's own errors."""
        checks = [
            (bool(self.lost), "referenced rows deleted"),
            (bool(self.overdue), "orphans overdue"),
            (self.tally.deleted_in_chaos == 0, "no row deleted while the chaos ran"),
            (self.journal.differed > 0, "journalled listings differed from full ones"),
            (self.journal.compared == 0, "no journalled listing compared with a full one"),
            (bool(self.errors), "the soak's own errors"),
        ]
        return [reason for failed, reason in checks if failed]

    def line(self) -> str:
        outcomes, named = self.tally.outcomes, ("completed", "skipped", "aborted")
        main = " ".join(f"{name}={outcomes[name]}" for name in named)
        extra = "".join(f" {name}={n}" for name, n in sorted(outcomes.items()) if name not in named)
        errors = f", soak errors={len(self.errors)} (verdict void)" if self.errors else ""
        lapsed = len(self.violations) - len(self.lost)
        if lapsed:
            errors += f", {lapsed} more deleted after the soak let their admission lapse"
        return (
            f"soak: {len(self.lost)} referenced rows deleted, {len(self.overdue)} orphans older than "
            f"grace+2 intervals left, sweeps: {main}{extra} (rows deleted={self.tally.rows_deleted()}, "
            f"during chaos={self.tally.deleted_in_chaos}, orphans reclaimed={self.reclaimed}, "
            f"minutes={self.settings.minutes:g}, seed={self.settings.seed}); {self.journal.summary()}{errors}"
            + ("" if self.passed else f"; FAIL: {', '.join(self.failures())}")
        )
