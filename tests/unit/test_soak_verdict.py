"""The soak's verdict line says FAIL and why whenever its exit code is 1: CI shows the line, not the code."""

from __future__ import annotations

import json
from pathlib import Path

from tools.soak.journal_checks import JournalTally, read_journal_checks
from tools.soak.settings import SoakSettings
from tools.soak.sweepers import SweepTally
from tools.soak.verdict import Verdict


def verdict(
    deleted_in_chaos: int, overdue: list[str] | None = None, journal: JournalTally | None = None
) -> Verdict:
    tally = SweepTally()
    tally.deleted_in_chaos = deleted_in_chaos
    checked = JournalTally(compared=40) if journal is None else journal
    return Verdict(SoakSettings(minutes=2, seed=7), [], overdue or [], 0, tally, [], checked)


def test_a_soak_that_deleted_nothing_during_its_chaos_fails_and_says_so() -> None:
    untested = verdict(deleted_in_chaos=0)
    assert not untested.passed
    assert untested.line().endswith("; FAIL: no row deleted while the chaos ran")


def test_each_failed_condition_is_named() -> None:
    late = verdict(deleted_in_chaos=5, overdue=["k1"])
    assert not late.passed
    assert late.line().endswith("; FAIL: orphans overdue")


def test_a_passing_soak_line_has_no_fail_and_says_how_many_journalled_listings_were_compared() -> None:
    good = verdict(deleted_in_chaos=5)
    assert good.passed
    assert "FAIL" not in good.line()
    assert "journal: 40 listings compared, 0 differed" in good.line()


def test_a_journalled_listing_that_differed_from_the_full_one_fails_the_soak() -> None:
    differed = verdict(deleted_in_chaos=5, journal=JournalTally(compared=40, differed=1))
    assert not differed.passed
    assert "journal: 40 listings compared, 1 differed" in differed.line()
    assert differed.line().endswith("; FAIL: journalled listings differed from full ones")


def test_a_soak_that_compared_no_journalled_listing_fails() -> None:
    unchecked = verdict(deleted_in_chaos=5, journal=JournalTally(compared=0, full_listings=12))
    assert not unchecked.passed
    assert unchecked.line().endswith("; FAIL: no journalled listing compared with a full one")


def test_the_sweepers_check_records_are_summed_and_a_line_cut_by_a_sigkill_is_skipped(tmp_path: Path) -> None:
    sidecar, cli = tmp_path / "sidecar.jsonl", tmp_path / "cli.jsonl"
    compared = {
        "event": "compared",
        "partition": "p",
        "rows": 10,
        "excused": 2,
        "differed": 0,
        "differences": [],
    }
    differed = {
        **compared,
        "differed": 2,
        "differences": [{"index": 3, "journalled": None, "full": ["a", 8]}],
    }
    sidecar.write_text("\n".join(json.dumps(r) for r in (compared, compared, differed)) + "\n")
    cli.write_text(
        json.dumps({"event": "full", "partition": "p", "why": "no earlier read of this journal"})
        + "\n"
        + json.dumps({"event": "not compared", "partition": "p", "why": "the journal overflowed"})
        + '\n{"event": "comp'
    )
    tally = read_journal_checks({"sidecar": sidecar, "cli-b": cli, "cli-c": tmp_path / "never-written"})
    assert (tally.compared, tally.differed, tally.not_compared, tally.full_listings) == (3, 1, 1, 1)
    assert (tally.cut_lines, tally.rows_compared, tally.excused) == (1, 30, 6)
    assert tally.compared_by_sweeper == {"sidecar": 3, "cli-b": 0, "cli-c": 0}
    assert tally.differences == [{"sweeper": "sidecar", **differed}]
    assert tally.why_not_compared == {"the journal overflowed": 1}
    assert tally.why_full == {"no earlier read of this journal": 1}
