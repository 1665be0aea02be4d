"""What becomes of each in-scope row: deleted, or kept for one reason. Pure data, no I/O.

One name per reason in the code: a Decision. Its value is the reason's label in
tqgc_rows_kept_total{reason} (dashboards and alerts select on it), WHY_KEPT its line in the CLI's table,
and the report's counts name each by a field of their own (report.Counts.kept): published names, kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from tq_gc.referenced import Source


class Decision(StrEnum):
    """The plan puts every in-scope row under exactly one of these but KEEP_RECHECK, which is the sweep's:
    a planned delete that the re-check before its batch kept."""

    DELETE = "delete"
    KEEP_ADMISSION = "admission"
    KEEP_MANIFEST = "manifest"
    KEEP_TAG = "tag"
    KEEP_OWNER = "owner"
    KEEP_GRACE = "grace"
    KEEP_RECHECK = "recheck"
    KEEP_OVER_CAP = "cap"


PLANNED = tuple(decision for decision in Decision if decision is not Decision.KEEP_RECHECK)
KEEPS = tuple(decision for decision in Decision if decision is not Decision.DELETE)

# A referenced row is kept for the first source that references it, in this order.
KEEP_BY_SOURCE: Mapping[Source, Decision] = {
    Source.ADMISSIONS: Decision.KEEP_ADMISSION,
    Source.MANIFESTS: Decision.KEEP_MANIFEST,
    Source.TAGS: Decision.KEEP_TAG,
    Source.OWNERS: Decision.KEEP_OWNER,
}

WHY_KEPT: Mapping[Decision, str] = {
    **{decision: f"referenced by {source.value}" for source, decision in KEEP_BY_SOURCE.items()},
    Decision.KEEP_GRACE: "within grace",
    Decision.KEEP_OVER_CAP: "over the cap",
    Decision.KEEP_RECHECK: "re-check saved",
}
