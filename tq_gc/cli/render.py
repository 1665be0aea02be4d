"""Human output of the CLI: rich tables on stdout, progress on stderr (only on a terminal)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from tq_gc.cli.footprint_view import footprint_lines, footprint_summary
from tq_gc.decisions import WHY_KEPT
from tq_gc.report import Counts


def _console() -> Console:
    # Built per call: tests and the CLI swap sys.stdout, and a console caches its file.
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


@contextmanager
def progress(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    bar = Progress(
        "deleting", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True)
    )
    task = bar.add_task("delete", total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


def sweep_report(doc: dict[str, Any]) -> None:
    console = _console()
    counts = doc["counts"]
    title = f"sweep {doc['run_id']}  {doc['outcome']}" + ("  (dry run)" if doc["dry_run"] else "")
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("rows", justify="right")
    table.add_row("listed", str(counts["listed"]))
    table.add_row("in scope", str(counts["in_scope"]))
    for decision, rows in Counts.from_dict(counts).kept().items():
        table.add_row(f"kept: {WHY_KEPT[decision]}", str(rows))
    table.add_row("eligible", str(counts["eligible"]))
    table.add_row("deleted", str(counts["deleted"]))
    console.print(table)
    if doc["reason"]:
        console.print(f"reason: {doc['reason']}")
    if doc["dry_run"] and counts["eligible"]:
        console.print(f"dry run: {counts['eligible']} rows would be deleted; run with --execute to delete.")
    phases = ", ".join(f"{k} {v:.0f} ms" for k, v in doc["phases_ms"].items())
    console.print(f"phases: {phases}")
    for line in footprint_lines(footprint_summary([doc])):
        console.print(line)


def status(doc: dict[str, Any]) -> None:
    console = _console()
    lease = doc["lease"]
    console.print(f"namespace {doc['namespace']}  state {doc['state_url']}")
    console.print(
        "lease: free"
        if lease is None
        else f"lease: {lease['holder']} (expires in {lease['expires_in_s']:.0f} s)"
    )
    console.print("fences: " + (", ".join(doc["fences"]) or "none"))
    if "liveness" in doc:
        console.print(liveness_line(doc["liveness"]))
    waiting = Table(title=f"rows waiting out their grace ({doc['grace_seconds']:g} s)")
    for column in ("partition", "rows", "oldest (s)"):
        waiting.add_column(column)
    for partition, summary in doc["waiting"].items():
        waiting.add_row(partition, str(summary["rows"]), f"{summary['oldest_s']:.0f}")
    console.print(waiting)
    runs = Table(title="last runs")
    for column in ("run", "finished", "outcome", "deleted", "eligible", "reason"):
        runs.add_column(column)
    for run in doc["runs"]:
        counts = run.get("counts", {})
        runs.add_row(
            run["run_id"],
            run.get("finished_at", ""),
            run["outcome"] + (" (dry)" if run.get("dry_run") else ""),
            str(counts.get("deleted", 0)),
            str(counts.get("eligible", 0)),
            run.get("reason") or "",
        )
    console.print(runs)
    for line in footprint_lines(doc.get("footprint") or {}):
        console.print(line)


def admissions(doc: dict[str, Any]) -> None:
    table = Table(title=f"live admissions ({len(doc['admissions'])})")
    for column in ("admission", "partition", "rows", "first keys"):
        table.add_column(column)
    for admission_id, rows in sorted(doc["admissions"].items()):
        for partition, keys in rows.items():
            table.add_row(admission_id, partition, str(len(keys)), ", ".join(keys[:3]))
    _console().print(table)


def audit(doc: dict[str, Any]) -> None:
    table = Table(title=f"deleted rows ({len(doc['deleted'])})")
    for column in ("run", "partition", "key", "global index", "unreferenced (s)", "confirmed"):
        table.add_column(column)
    for row in doc["deleted"]:
        table.add_row(
            row["run_id"],
            row["partition"],
            row["key"],
            str(row["global_index"]),
            f"{row['unreferenced_s']:.0f}",
            # An intent never confirmed: the sweeper stopped mid-batch; the row may or may not be gone.
            "yes" if row["confirmed"] else "NO (may be deleted)",
        )
    _console().print(table)


def checks(doc: dict[str, Any]) -> None:
    table = Table(title="tq-gc check")
    for column in ("check", "ok", "detail"):
        table.add_column(column)
    for result in doc["checks"]:
        table.add_row(result["name"], "yes" if result["ok"] else "NO", result["detail"])
    _console().print(table)


def liveness_line(found: dict[str, Any]) -> str:
    """`tq-gc status`'s liveness line: the last hour's sweeps by outcome and cause, what blocks them."""
    if not found["sweeps"]:
        return "sweeps, last hour: none recorded"
    by_outcome: dict[str, list[str]] = {}
    for share in found["shares"]:
        cause = "" if share["cause"] == "none" else f"{share['cause']} "
        by_outcome.setdefault(share["outcome"], []).append(f"{cause}{share['share']:.0%}")
    parts = [f"{outcome} {', '.join(causes)}" for outcome, causes in by_outcome.items()]
    line = f"sweeps, last hour ({found['sweeps']}): {'; '.join(parts)}"
    if found["since_completed"]:
        line += f"; the last {found['since_completed']} did not complete"
    blocking = found["checkpoint_blocking"]
    if blocking is not None:
        line += (
            f"; skipped for {blocking['seconds']:.0f} s ({blocking['sweeps']} sweeps) for a checkpoint being "
            f"written: {blocking['reason']}"
        )
    return line
