"""The demo's final table, piped: one line a row, nothing hard-wrapped (a log keeps it readable)."""

from __future__ import annotations

import pytest

from tq_gc.cli.demo import outcome_table
from tq_gc.cli.render import output_console, print_table
from tq_gc.cli.simulation import STAGING, Fates
from tq_gc.rows import RowId

LONG_WHY = "restored call's admission (normal lane), named again after the forest lane rebuilt its admission"


def test_piped_the_final_table_keeps_each_row_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    fates = Fates()
    fates.keep([RowId(STAGING, "a")], LONG_WHY)
    fates.orphan([RowId(STAGING, "b"), RowId(STAGING, "c")], "prefix chunk dropped by the forest lane")
    print_table(output_console(), outcome_table(fates, {RowId(STAGING, "b"): 1.0}, []))
    lines = capsys.readouterr().out.splitlines()
    assert any(LONG_WHY in line and "kept" in line for line in lines)
    assert any(
        "prefix chunk dropped by the forest lane" in line and "reclaimed 1/2" in line for line in lines
    )
