"""The change journal's checks in the soak: the sweepers that list by the journal do so in its check
mode (tools/testbed/tuned_cli.py's `--journal-checks-to`), each appending one JSON line per event to a
file of its own: a journalled listing compared with the full one taken right after it, one that could
not be compared, a full listing the journal fell back to. Summed here for the verdict."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIFFERENCES_KEPT = 20  # the first comparisons that differed, in the soak's details


@dataclass
class JournalTally:
    compared: int = 0
    differed: int = 0  # comparisons with a difference
    not_compared: int = 0
    full_listings: int = 0
    cut_lines: int = 0  # a line a SIGKILLed CLI left unfinished
    rows_compared: int = 0  # the journalled listings' rows, summed over the comparisons
    excused: int = 0  # the indexes touched between the two reads, summed (left out of the comparison)
    compared_by_sweeper: dict[str, int] = field(default_factory=dict)
    differences: list[dict[str, Any]] = field(default_factory=list)
    why_not_compared: Counter[str] = field(default_factory=Counter)
    why_full: Counter[str] = field(default_factory=Counter)

    def add(self, sweeper: str, record: dict[str, Any]) -> None:
        event = record.get("event")
        if event == "compared":
            self.compared += 1
            self.rows_compared += int(record.get("rows", 0))
            self.excused += int(record.get("excused", 0))
            self.compared_by_sweeper[sweeper] = self.compared_by_sweeper.get(sweeper, 0) + 1
            if record.get("differed"):
                self.differed += 1
                if len(self.differences) < DIFFERENCES_KEPT:
                    self.differences.append({"sweeper": sweeper, **record})
        elif event == "not compared":
            self.not_compared += 1
            self.why_not_compared[str(record.get("why"))] += 1
        elif event == "full":
            self.full_listings += 1
            self.why_full[str(record.get("why"))] += 1

    def summary(self) -> str:
        return f"journal: {self.compared} listings compared, {self.differed} differed"

    def to_dict(self) -> dict[str, Any]:
        """The counts (the differences apart: the soak's details keep them)."""
        return {
            "compared": self.compared,
            "differed": self.differed,
            "not_compared": self.not_compared,
            "full_listings": self.full_listings,
            "cut_lines": self.cut_lines,
            "rows_compared": self.rows_compared,
            "excused": self.excused,
            "compared_by_sweeper": self.compared_by_sweeper,
            "why_not_compared": dict(self.why_not_compared),
            "why_full": dict(self.why_full),
        }


def read_journal_checks(paths: Mapping[str, Path]) -> JournalTally:
    """{sweeper: its check file} summed; a file never written is a sweeper that made no listing."""
    tally = JournalTally()
    for sweeper, path in paths.items():
        tally.compared_by_sweeper.setdefault(sweeper, 0)
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                tally.cut_lines += 1
                continue
            tally.add(sweeper, record)
    return tally
