"""The sweepers under test, and the tally of their sweeps: two looping `tq-gc sweep --execute --json`
processes (one of them SIGKILLed at random moments) and the job's sidecar (watched through status()).

Sweeps by outcome come from what the sweepers themselves report: each CLI run's JSON report, and the
reports the sidecar keeps (status()["last_reports"], polled often enough that none is missed).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import ray

log = logging.getLogger("soak")

CLI_TIMEOUT_S = 120.0
REAP_TIMEOUT_S = 10.0


class SweepTally:
    """Thread-safe: sweeps by outcome, rows deleted, per sweeper."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes = Counter[str]()
        self.by_sweeper = Counter[tuple[str, str]]()
        self.deleted = Counter[str]()
        self.reasons = Counter[str]()
        self.deleted_in_chaos = 0  # by sweeps that finished before the chaos ended
        self._chaos_ended_unix: float | None = None
        self._completed: list[tuple[float, float]] = []  # (started_at, finished_at), Unix seconds

    def report(self, sweeper: str, report: dict[str, Any]) -> None:
        outcome = str(report.get("outcome"))
        deleted = int(report.get("counts", {}).get("deleted", 0))
        with self._lock:
            if outcome == "completed":
                self._completed.append((_unix(report["started_at"]), _unix(report["finished_at"])))
            self.outcomes[outcome] += 1
            self.by_sweeper[(sweeper, outcome)] += 1
            self.deleted[sweeper] += deleted
            if self._chaos_ended_unix is None or _unix(report["finished_at"]) <= self._chaos_ended_unix:
                self.deleted_in_chaos += deleted
            if report.get("reason"):
                self.reasons[f"{outcome}: {_short_reason(str(report['reason']))}"] += 1

    def end_chaos(self, at_unix: float) -> None:
        """Rows deleted by sweeps that finish after `at_unix` went with nothing moving any more."""
        with self._lock:
            self._chaos_ended_unix = at_unix

    def other(self, sweeper: str, what: str) -> None:
        """A sweep with no report: SIGKILLed, or an exit with no JSON (a crash)."""
        with self._lock:
            self.outcomes[what] += 1
            self.by_sweeper[(sweeper, what)] += 1

    def rows_deleted(self) -> int:
        with self._lock:
            return sum(self.deleted.values())

    def had_their_chance(self, since_unix: float, grace_s: float) -> bool:
        """Has every orphan there at `since_unix` been due in some completed sweep? That takes a
        completed sweep started after it (it saw them all), then completed sweeps no more than a grace
        apart (grace accrues only while sweeps observe) up to one started a grace after the first ended."""
        with self._lock:
            completed = sorted(run for run in self._completed if run[0] > since_unix)
        first: tuple[float, float] | None = None
        previous_start = 0.0
        for started, finished in completed:
            if first is None or started - previous_start > grace_s:
                first = (started, finished)  # (a gap: clocks start again)
            elif started >= first[1] + grace_s:
                return True
            previous_start = started
        return False


def _unix(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _short_reason(reason: str) -> str:
    """A reason without the ids that make every one unique (hosts, pids, run ids, counts)."""
    words = reason.split()
    return " ".join("#" if any(c.isdigit() for c in w) else w for w in words)[:90]


@dataclass
class CliLoopSettings:
    config: Path
    env: dict[str, str]
    pause_seconds: tuple[float, float]  # between two runs
    kill_chance: float  # of each run being SIGKILLed, while chaos is on
    kill_after_s: tuple[float, float]  # how long after its start


class CliSweeperLoop(threading.Thread):
    """`tq-gc sweep --execute --json --config F` in a loop, each run a process (and session) of its own.
    `command`: the CLI (tools/testbed/tuned_cli.py: the soak's delete batch and lease TTL)."""

    def __init__(
        self,
        name: str,
        seed: int,
        command: Sequence[str],
        workdir: Path,
        settings: CliLoopSettings,
        tally: SweepTally,
        chaos: threading.Event,
        stop: threading.Event,
        errors: list[str],
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._rng = random.Random(seed)
        self._command, self._workdir, self._settings = list(command), workdir, settings
        self._tally, self._chaos, self._halt, self._errors = tally, chaos, stop, errors
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.runs = 0
        self.kills = 0

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self._one_run()
                self._halt.wait(self._rng.uniform(*self._settings.pause_seconds))
        except Exception as exc:
            log.exception("%s crashed", self.name)
            self._errors.append(f"{self.name}: {type(exc).__name__}: {exc}")

    def _one_run(self) -> None:
        self.runs += 1
        out, err = self._workdir / f"{self.name}.out", self._workdir / f"{self.name}.err"
        # nice: the job's own processes (TQ, the publishers) come first on 2 cores
        args = [
            "nice",
            "-n",
            "5",
            *self._command,
            "sweep",
            "--execute",
            "--json",
            "--config",
            str(self._settings.config),
        ]
        with out.open("wb") as stdout, err.open("ab") as stderr:
            stderr.write(f"\n--- run {self.runs} at {time.strftime('%H:%M:%S')}\n".encode())
            stderr.flush()
            with self._lock:
                if self._halt.is_set():
                    return
                self._process = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    env=self._settings.env,
                    start_new_session=True,  # its own group: a SIGKILL reaches all of it
                )
        killed = self._wait_or_kill(self._process)
        with self._lock:
            self._process = None
        if killed is not None:
            self.kills += killed == "killed"
            self._tally.other(self.name, killed)
            return
        printed = out.read_text(errors="replace")
        with (self._workdir / f"{self.name}.jsonl").open("a") as reports_log:
            reports_log.write(printed.strip() + "\n")
        self._record(printed)

    def _wait_or_kill(self, process: subprocess.Popen[bytes]) -> str | None:
        """Wait for the run; SIGKILL it at a random moment if this run is a victim (or if it hangs).
        Returns "killed" or "hung" if it was killed."""
        victim = self._chaos.is_set() and self._rng.random() < self._settings.kill_chance
        timeout_seconds = self._rng.uniform(*self._settings.kill_after_s) if victim else CLI_TIMEOUT_S
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout_seconds)
            return None
        if victim and self._chaos.is_set():
            _kill_group(process)
            return "killed"
        with contextlib.suppress(subprocess.TimeoutExpired):  # chaos ended meanwhile: let it finish
            process.wait(timeout=CLI_TIMEOUT_S)
            return None
        _kill_group(process)
        return "hung"

    def _record(self, stdout: str) -> None:
        try:
            report = json.loads(stdout)
        except ValueError:
            report = None
        if isinstance(report, dict):
            self._tally.report(self.name, report)
        else:
            self._tally.other(self.name, "no-report")

    def close(self, finish_within_s: float = REAP_TIMEOUT_S) -> None:
        """Stop looping; a run in progress gets `finish_within_s` to finish, then is killed."""
        self._halt.set()
        with self._lock:
            process = self._process
        if process is not None:
            try:
                process.wait(timeout=finish_within_s)
            except subprocess.TimeoutExpired:
                _kill_group(process)
        self.join(timeout=CLI_TIMEOUT_S)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run and its session, then reap it (while unreaped its group id cannot be reused)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=REAP_TIMEOUT_S)


class SidecarWatcher(threading.Thread):
    """Polls the sidecar's status() and tallies every report it kept (it keeps the last few: polled
    well within that many sweeps), and each new `last_error` (a sweep that raised)."""

    def __init__(
        self, handle: Any, tally: SweepTally, poll_s: float, stop: threading.Event, log_path: Path
    ) -> None:
        super().__init__(name="sidecar-watcher", daemon=True)
        self._handle, self._tally, self._poll_s, self._halt = handle, tally, poll_s, stop
        self._log_path = log_path  # every report, one JSON line each
        self._seen: set[str] = set()
        self._last_error: Any = None
        self.polls_failed = 0
        self.maybe_missed = 0

    def run(self) -> None:
        while not self._halt.wait(self._poll_s):
            self.poll()

    def poll(self) -> None:
        try:
            status = ray.get(self._handle.status.remote(), timeout=30)
        except Exception as exc:
            self.polls_failed += 1
            log.warning("sidecar status() failed: %s", exc)
            return
        reports = status.get("last_reports", [])
        new = [report for report in reversed(reports) if report["run_id"] not in self._seen]
        if len(new) == len(reports) and self._seen:
            self.maybe_missed += 1  # every kept report is new: older ones may have gone unseen
        with self._log_path.open("a") as reports_log:
            for report in new:
                self._seen.add(report["run_id"])
                self._tally.report("sidecar", report)
                reports_log.write(json.dumps(report) + "\n")
        error = status.get("last_error")
        if error is not None and error != self._last_error:
            self._last_error = error
            self._tally.other("sidecar", "raised")
            log.warning("sidecar sweep raised: %s", error)
