"""The sweep report's JSON (a documented contract) reads back as the report it was written from."""

from __future__ import annotations

from tq_gc.audit import DeletedRow
from tq_gc.report import Cause, Outcome, SweepReport


def test_a_report_with_deleted_rows_reads_back_from_its_json() -> None:
    report = SweepReport("run-1", "job-42", dry_run=False, outcome=Outcome.ABORTED, cause=Cause.LEASE_LOST)
    report.counts.deleted, report.counts.within_grace = 2, 1
    report.counts.referenced["tags"] = 3
    report.deleted_sample = [DeletedRow("staging", "r1/c1", 901.5), DeletedRow("staging", "r1/c2", 1200.25)]
    report.record_tq_requests({"clear_samples": [0.004]})
    document = report.to_dict()
    again = SweepReport.from_dict(document)
    assert again.to_dict() == document
    assert again.deleted_sample == report.deleted_sample
