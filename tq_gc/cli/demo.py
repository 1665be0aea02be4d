"""`tq-gc demo`: the whole story on one machine, with no Redis and no config.

Starts a local Ray cluster and a real TransferQueue, runs the sidecar on a seconds-long schedule,
plays the toy training job of simulation.py, and shows orphans appearing, protected rows staying, and
orphans reclaimed once their grace has passed. Cleans up everything it started.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tq_gc.cli.demo_cluster import Narrator, demo_cluster, ray_get, reclaimed_bytes, sidecar_metrics
from tq_gc.cli.footprint_view import footprint_lines, footprint_summary, human_bytes
from tq_gc.cli.render import output_console, print_table
from tq_gc.cli.simulation import CANONICAL, STAGING, Fates, LeakScenario
from tq_gc.config import Config, parse_config
from tq_gc.rows import RowId
from tq_gc.wiring import DEFAULT_DUTY_CYCLE

TQ_CONFIG = {
    "controller": {"polling_mode": True},
    "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {"num_data_storage_units": 2}},
}


@dataclass(frozen=True)
class DemoTimings:
    grace_seconds: float = 3.0
    interval_seconds: float = 1.0
    # How long the demo waits for a sweep, or for every orphan to go (conditions it polls): a machine
    # busy with other work makes a sweep take seconds, and 30 s were too few.
    deadline_seconds: float = 120.0


def demo_config(manifest_dir: Path, timings: DemoTimings) -> Config:
    return parse_config(
        {
            "namespace": "demo",
            "state_url": "memory://",
            "scope": [{"partition": STAGING, "all_keys": True}],
            "grace_seconds": timings.grace_seconds,
            "allow_short_grace": True,
            "manifests": [{"glob": f"{manifest_dir}/**/gc-manifest.json"}],
            "tag_references": [
                {
                    "partition": CANONICAL,
                    "key_path": "route_assembly_plan.cleanup_staging_keys",
                    "target_partition": STAGING,
                }
            ],
            "schedule": {"interval_seconds": timings.interval_seconds},
        },
        origin="demo",
    )


class Demo:
    def __init__(self, console: Console, timings: DemoTimings, duty_cycle: float) -> None:
        self.console = console
        self.duty_cycle = duty_cycle
        self.narrator = Narrator(console)
        self.say = self.narrator.say
        self.reclaimed_bytes = 0
        self.footprint: list[str] = []
        self.timings = timings

    def run(self) -> int:
        with demo_cluster(TQ_CONFIG, self.say, "SimpleStorage, 2 units") as tmp:
            self.say("cluster up: this process plays the training job")
            return self._play(demo_config(tmp, self.timings), tmp)

    def _play(self, config: Config, manifest_dir: Path) -> int:
        from tq_gc.sidecar.client import sidecar_registry, start_sidecar, wait_for_warm_up

        # Metrics on any free port: the demo reads what the sidecar counted.
        handle = start_sidecar(config, duty_cycle=self.duty_cycle, metrics_port=0)
        if not wait_for_warm_up(handle):
            self.say("the sidecar is still importing TransferQueue: going on (a slow machine)")
        status = ray_get(handle.status.remote())
        self.say(
            f"sidecar [bold]{status['name']}[/bold] started: sweeps every "
            f"{self.timings.interval_seconds:g} s, grace {self.timings.grace_seconds:g} s, "
            f"metrics on port {status.get('metrics_port')}"
        )
        registry = sidecar_registry()  # the sidecar's, by its fixed name
        scenario = LeakScenario(registry, manifest_dir)
        for step in (scenario.generation, scenario.checkpoint, scenario.restore, scenario.abandon):
            for line in step():
                self.say(line)
            self._next_sweep(handle)
        self.say(
            f"{len(scenario.fates.orphans)} orphans now sit in TQ with nothing pointing to them; "
            f"{sum(1 for r in scenario.fates.kept if r.partition == STAGING)} staging rows are referenced"
        )
        reclaimed_at = self._watch(scenario)
        # The sweep that cleared the last orphan counts its deletes in the metrics when it ends, after
        # TQ already shows the rows gone: wait for its report (it holds the bytes left) before reading them.
        self._next_sweep(handle)
        self.footprint = footprint_lines(footprint_summary(ray_get(handle.status.remote())["last_reports"]))
        self.reclaimed_bytes = reclaimed_bytes(status.get("metrics_port"))
        ok = self._verify(scenario, reclaimed_at)
        self._metrics(status.get("metrics_port"))
        ray_get(handle.shutdown.remote())
        return 0 if ok else 1

    def _next_sweep(self, handle: Any) -> None:
        """Wait for the sidecar's next scheduled sweep and say what it saw."""
        seen = {report["run_id"] for report in ray_get(handle.status.remote())["last_reports"]}
        deadline = time.monotonic() + self.timings.deadline_seconds
        while time.monotonic() < deadline:
            reports = ray_get(handle.status.remote())["last_reports"]
            fresh = [report for report in reports if report["run_id"] not in seen]
            if fresh:
                self.say(_sweep_line(fresh[0]))
                return
            time.sleep(self.timings.interval_seconds / 4)

    def _watch(self, scenario: LeakScenario) -> dict[RowId, float]:
        import transfer_queue as tq

        reclaimed: dict[RowId, float] = {}
        deadline = time.monotonic() + self.timings.deadline_seconds
        while len(reclaimed) < len(scenario.fates.orphans) and time.monotonic() < deadline:
            time.sleep(0.5)
            present = set(tq.kv_list(STAGING).get(STAGING, {}))
            for row, how in scenario.fates.orphans.items():
                if row.key not in present and row not in reclaimed:
                    reclaimed[row] = time.monotonic() - self.narrator.started
                    self.say(f"[green]reclaimed[/green] {row.key}  ({how})")
        return reclaimed

    def _verify(self, scenario: LeakScenario, reclaimed: dict[RowId, float]) -> bool:
        import transfer_queue as tq

        listed = {p: set(rows) for p, rows in tq.kv_list().items()}
        lost = [row for row in scenario.fates.kept if row.key not in listed.get(row.partition, set())]
        readable = [r.key for r in scenario.fates.kept if r.partition == STAGING and r not in lost]
        tq.kv_batch_get(readable, STAGING)  # raises if any referenced row lost its data
        self._summary(scenario, reclaimed, lost)
        missed = len(scenario.fates.orphans) - len(reclaimed)
        if lost or missed:
            self.console.print(f"[red]FAILED[/red]: {len(lost)} referenced rows lost, {missed} orphans left")
            return False
        self.console.print(
            f"[bold green]OK[/bold green]: every orphan reclaimed; all {len(scenario.fates.kept)} referenced "
            "rows still readable; the canonical partition untouched"
        )
        return True

    def _summary(self, scenario: LeakScenario, reclaimed: dict[RowId, float], lost: list[RowId]) -> None:
        table = outcome_table(scenario.fates, reclaimed, lost)
        table.add_row("bytes", "the orphans' tensors", "", f"reclaimed {human_bytes(self.reclaimed_bytes)}")
        print_table(self.console, table)
        for line in self.footprint:
            self.console.print(line)

    def _metrics(self, port: Any) -> None:
        text = sidecar_metrics(port)
        if not text:
            return
        lines = [
            line
            for line in text.splitlines()
            if line.startswith("tqgc_") and "_bucket" not in line and "_created" not in line
        ]
        self.console.print("[bold]final metrics[/bold] (/metrics, tqgc_*):")
        for line in lines:
            self.console.print(f"  {line}", highlight=False)


def outcome_table(fates: Fates, reclaimed: Mapping[RowId, float], lost: list[RowId]) -> Table:
    """What happened to every row the job wrote: each reason a row was kept or orphaned, and its fate."""
    table = Table(title="what happened to every row the job wrote")
    for column in ("rows", "how / why", "count", "outcome"):
        table.add_column(column, no_wrap=True)  # piped, a row is one line (output_console)
    for why, n in sorted(Counter(fates.kept.values()).items()):
        table.add_row("referenced", why, str(n), "kept")
    for how, n in sorted(Counter(fates.orphans.values()).items()):
        gone = sum(1 for r, h in fates.orphans.items() if h == how and r in reclaimed)
        table.add_row("orphan", how, str(n), f"reclaimed {gone}/{n}")
    if lost:
        table.add_row("[red]LOST[/red]", "referenced rows deleted", str(len(lost)), "[red]bug[/red]")
    return table


def _sweep_line(report: dict[str, Any]) -> str:
    counts = report["counts"]
    held = ", ".join(f"{source} {n}" for source, n in counts["referenced"].items() if n)
    return (
        f"[cyan]sweep[/cyan]: {counts['in_scope']} staging rows; protected by {held or 'nothing'}; "
        f"{counts['within_grace']} unreferenced rows waiting out their grace; {counts['deleted']} deleted"
    )


def run_demo(
    timings: DemoTimings | None = None,
    console: Console | None = None,
    duty_cycle: float = DEFAULT_DUTY_CYCLE,
) -> int:
    """The demo; its sidecar presses on the demo's TransferQueue at most `duty_cycle` of the time."""
    console = console or output_console()
    console.print(
        "[bold]tq-gc demo[/bold]: a toy RL training job leaks TransferQueue rows; the sidecar reclaims them"
    )
    return Demo(console, timings or DemoTimings(), duty_cycle).run()
