"""Human output of the CLI: rich tables on stdout, progress on stderr (only on a terminal)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tq_gc.cli.footprint_view import footprint_lines, footprint_summary
from tq_gc.decisions import WHY_KEPT
from tq_gc.listings import HowListed
from tq_gc.report import Counts
from tq_gc.sweep.run import PhaseListener
from tq_gc.sweep.run import Progress as DeleteProgress

log = logging.getLogger("tq_gc.cli")

# Off a terminal (piped, redirected) a table is as wide as its rows: nothing is cut or wrapped, so a run
# id or a key copied from it pastes whole. On a terminal, --wide does the same.
UNBOUNDED_WIDTH = 10_000


def output_console(wide: bool = False) -> Console:
    """The console human output goes to. Built per call: tests and the CLI swap sys.stdout, and a console
    caches its file."""
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    if wide or not console.is_terminal:
        console.width = UNBOUNDED_WIDTH
    return console


def _console(wide: bool = False) -> Console:
    return output_console(wide)


def utc_iso(at_ms: int) -> str:
    """A time on the store's clock (ms since the epoch) as UTC ISO 8601, to the second."""
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="seconds")


def _id_column(table: Table, header: str, **options: Any) -> None:
    """A column of ids and keys: never cut, never wrapped (the other columns give way; print_table)."""
    table.add_column(header, no_wrap=True, overflow="ignore", **options)


def print_table(console: Console, table: Table) -> None:
    """Print `table` with its id columns whole: each at least as wide as its longest id, and the console
    widened past the terminal if the table cannot fit otherwise (the terminal wraps the line; a copied
    id still pastes whole)."""
    for column in table.columns:
        if column.no_wrap and column.overflow == "ignore":
            column.min_width = max((cell_len(str(cell)) for cell in column.cells), default=0)
    needed = Measurement.get(console, console.options.update(width=UNBOUNDED_WIDTH), table).minimum
    if needed > console.width:
        console.width = needed
    console.print(table)


class SweepProgress(NamedTuple):
    """What a sweep tells the CLI as it goes: its deletes (done, total) and its phases."""

    deletes: DeleteProgress | None
    phases: PhaseListener | None


# What a phase does, while it runs, on a terminal.
_DOING = {
    "lease": "taking the lease",
    "attach": "attaching to TransferQueue",
    "references": "reading references",
    "list": "listing rows",
    "plan": "planning",
    "delete": "deleting",
}
_DONE = {
    "lease": "lease taken",
    "attach": "attached",
    "references": "references read",
    "list": "listed {rows} rows",
    "plan": "planned: {rows} rows to delete",
    "delete": "deleted {rows} rows",
}


@contextmanager
def progress(live: bool) -> Iterator[SweepProgress]:
    """Each phase of the sweep with its own count: on a terminal (and `live`), a line as each ends and a
    bar while it deletes; off a terminal, a log line a phase with its count and rate."""
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        yield SweepProgress(None, log_phase)
        return
    if not live:
        yield SweepProgress(None, None)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[rows]}"))
    bar = Progress(*columns, TimeElapsedColumn(), console=console)
    task = bar.add_task("starting", total=None, rows="")  # a count only once there is one: no "0/?"

    def phase(name: str, rows: int | None, seconds: float | None) -> None:
        if seconds is None:
            bar.update(task, description=_DOING.get(name, name), completed=0, total=None, rows="")
        else:
            done = _DONE.get(name, name).format(rows=rows if rows is not None else "?")
            bar.console.print(f"{done} ({seconds:.1f} s)")

    def deleted(done: int, total: int) -> None:
        bar.update(task, description="deleting", completed=done, total=total, rows=f"{done}/{total}")

    with bar:
        yield SweepProgress(deleted, phase)


def log_phase(name: str, rows: int | None, seconds: float | None) -> None:
    """Off a terminal: a log line as each phase ends, with its rows and their rate."""
    if seconds is None:
        return
    if rows is None:
        log.info("phase %s: %.2f s", name, seconds)
    else:
        log.info("phase %s: %d rows in %.2f s (%.0f rows/s)", name, rows, seconds, rows / max(seconds, 1e-6))


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
    for warning in doc.get("warnings", []):
        console.print(f"[yellow]warning[/yellow]: {warning['message']}")
    if doc["reason"]:
        console.print(f"reason: {doc['reason']}")
    _sampled_rows(console, doc)
    if doc["dry_run"] and counts["eligible"]:
        console.print(f"dry run: {counts['eligible']} rows would be deleted; run with --execute to delete.")
    phases = ", ".join(f"{k} {v:.0f} ms" for k, v in doc["phases_ms"].items())
    console.print(f"phases: {phases}")
    pacing = doc.get("pacing_ms") or {}
    if pacing:  # the phases' time its row store spent waiting, holding nothing up
        console.print("pacing: " + ", ".join(f"{wait} {ms:.0f} ms" for wait, ms in pacing.items()))
    for partition, how in (doc.get("listings") or {}).items():  # the store's choice: by its journal, or full
        console.print(f"listed: {partition} {HowListed.from_dict(how)}", markup=False, highlight=False)
    for line in footprint_lines(footprint_summary([doc])):
        console.print(line)


def _sampled_rows(console: Console, doc: dict[str, Any]) -> None:
    """The rows deleted (a dry run: it would delete), each with why: unreferenced this long, past the
    grace, in its partition."""
    sample = doc["deleted_sample"]
    if not sample:
        return
    total = doc["counts"]["eligible"] if doc["dry_run"] else doc["counts"]["deleted"]
    what = "would delete" if doc["dry_run"] else "deleted"
    shown = f"all {total}" if len(sample) >= total else f"{len(sample)} of {total}; --all-rows for all"
    table = Table(title=f"rows it {what} ({shown}): unreferenced past their grace")
    table.add_column("partition")
    _id_column(table, "key")
    table.add_column("unreferenced for (s)", justify="right")
    for row in sample:
        table.add_row(row["partition"], row["key"], f"{row['unreferenced_s']:.0f}")
    print_table(console, table)


def status(doc: dict[str, Any], wide: bool = False) -> None:
    console = _console(wide)
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
    _id_column(runs, "run")
    for column in ("finished", "outcome", "deleted", "eligible", "reason"):
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
    print_table(console, runs)
    for line in footprint_lines(doc.get("footprint") or {}):
        console.print(line)


def admissions(doc: dict[str, Any]) -> None:
    table = Table(title=f"live admissions ({len(doc['admissions'])})")
    _id_column(table, "admission")
    for column in ("expires in (s)", "expires at (UTC)", "partition", "rows", "first keys"):
        table.add_column(column)
    expiry = doc.get("expiry", {})
    for admission_id, rows in sorted(doc["admissions"].items()):
        when = expiry.get(admission_id)
        left, at = ("", "") if when is None else (f"{when['expires_in_s']:.0f}", when["expires_at"])
        for partition, keys in rows.items():
            table.add_row(admission_id, left, at, partition, str(len(keys)), ", ".join(keys[:3]))
    print_table(_console(), table)


def audit(doc: dict[str, Any], wide: bool = False) -> None:
    table = Table(title=f"deleted rows ({len(doc['deleted'])})")
    _id_column(table, "run")
    table.add_column("partition")
    _id_column(table, "key")
    for column in ("global index", "unreferenced (s)", "confirmed"):
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
    print_table(_console(wide), table)


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
