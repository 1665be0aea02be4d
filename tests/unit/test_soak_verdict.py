"""The soak's verdict line says FAIL and why whenever its exit code is 1: CI shows the line, not the code."""

from __future__ import annotations

from tools.soak.settings import SoakSettings
from tools.soak.sweepers import SweepTally
from tools.soak.verdict import Verdict


def verdict(deleted_in_chaos: int, overdue: list[str] | None = None) -> Verdict:
    tally = SweepTally()
    tally.deleted_in_chaos = deleted_in_chaos
    return Verdict(SoakSettings(minutes=2, seed=7), [], overdue or [], 0, tally, [])


def test_a_soak_that_deleted_nothing_during_its_chaos_fails_and_says_so() -> None:
    untested = verdict(deleted_in_chaos=0)
    assert not untested.passed
    assert untested.line().endswith("; FAIL: no row deleted while the chaos ran")


def test_each_failed_condition_is_named() -> None:
    late = verdict(deleted_in_chaos=5, overdue=["k1"])
    assert not late.passed
    assert late.line().endswith("; FAIL: orphans overdue")


def test_a_passing_soak_line_has_no_fail() -> None:
    good = verdict(deleted_in_chaos=5)
    assert good.passed
    assert "FAIL" not in good.line()
