"""`tq-gc demo --capacity`: a job that dies without tq-gc runs with it.

A verl-shaped loop on a real TransferQueue whose storage holds `CAPACITY_ROWS` rows. Each resume restores
the trained step's batch, which nothing clears (verl's leak: docs/integrations.md, "verl"), then runs a
step the way verl does (its trajectories admitted while in use, as the trainer integration holds them,
then cleared). Without tq-gc a put fails with `Storage capacity exceeded` after N resumes; with the
sidecar at the shipped verl config (deploy/examples/verl.yaml; grace and schedule shortened to seconds)
the same loop runs 3N resumes with no failed put. Each resume's storage fill (the units' GET_METRICS) is
recorded: tests replay it through the alert TqGcStorageFullSoon with promtool (one resume a minute).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from tq_gc.cli.demo_cluster import Narrator, demo_cluster, ray_get, reclaimed_bytes
from tq_gc.cli.footprint_view import human_bytes
from tq_gc.config import Config, parse_config
from tq_gc.footprint import StorageFill
from tq_gc.sweep.clocks import utc_now_iso
from tq_gc.wiring import DEFAULT_DUTY_CYCLE

CAPACITY_ROWS = 240
# One storage unit: the fullest unit is what fails a put, and each unit is a worker process to start
# (seconds of the demo's minute on a busy 2-core machine).
UNITS = 1
BATCH_ROWS = 20
TRAIN, VAL = "train", "val"
VERL_EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verl.yaml"
RUN_ID = "capacity-demo"
# A resume's step with the sidecar racing the leak lasts until the sidecar has completed a sweep that
# began during it, however long that takes. A real step lasts minutes, many sweeps: the demo compresses
# time and keeps that order on a busy machine, where a step of fixed seconds had the leak outrun sweeps
# (a suite run at load 10: 12 of 36 resumes). A leaked batch stays about GRACE_SECONDS plus two sweeps
# (seen first, then deleted): a few steps. The grace stays above the longest gap between two sweeps on a
# busy machine (a longer gap restarts every row's grace: docs/safety.md).
GRACE_SECONDS = 3.0
# Each step waits for a sweep: the interval is most of a step on an idle machine.
SWEEP_INTERVAL_SECONDS = 0.25
SWEEP_WAIT_SECONDS = 120.0


@dataclass
class Leg:
    """One run of the loop: how many resumes it ran, the first failed put's error (None: none failed),
    and the fullest storage unit's (active keys, capacity) after each resume."""

    resumes: int = 0
    failure: str | None = None
    fill: list[tuple[int, int]] = field(default_factory=list)
    reclaimed_bytes: int = 0


def verl_config(example: Path = VERL_EXAMPLE, grace_seconds: float = GRACE_SECONDS) -> Config:
    """The shipped verl config, with grace and schedule shortened to the demo's seconds."""
    values: dict[str, Any] = yaml.safe_load(example.read_text())
    values.update(
        namespace="capacity-demo",
        state_url="memory://",
        grace_seconds=grace_seconds,
        allow_short_grace=True,
        schedule={"interval_seconds": SWEEP_INTERVAL_SECONDS},
    )
    return parse_config(values, origin=str(example))


def tq_config() -> dict[str, Any]:
    return {
        "controller": {"polling_mode": True},
        "backend": {
            "storage_backend": "SimpleStorage",
            "SimpleStorage": {"num_data_storage_units": UNITS, "total_storage_size": CAPACITY_ROWS},
        },
    }


class VerlShapedLoop:
    """The job: groups of trajectories `{uid}_0_{i}` under prompt rows `{uid}` in `train`, a prompt row in
    `val`, and a presence admission like the trainer integration's (with `registry`). Each step lasts
    until `step(began)` returns, `began` the resume's start (UTC ISO): without tq-gc nothing races the
    leak, so the steps need not take any time."""

    def __init__(self, registry: Any | None, step: Callable[[str], None] | None = None) -> None:
        import transfer_queue as tq

        self.tq = tq
        self.registry = registry
        self.step = step
        tq.kv_batch_put(keys=[str(uuid.uuid4())], partition_id=VAL, tags=[{"is_prompt": True}])

    def trajectories(self, rows: int) -> list[str]:
        uid = str(uuid.uuid4())
        return [f"{uid}_0_{i}" for i in range(rows)]

    def put(self, keys: list[str]) -> None:
        import torch
        from tensordict import TensorDict

        fields = TensorDict(
            {"responses": torch.zeros(len(keys), 64, dtype=torch.int32)}, batch_size=len(keys)
        )
        self.tq.kv_batch_put(
            keys=keys, partition_id=TRAIN, fields=fields, tags=[{"status": "success"}] * len(keys)
        )

    def resume(self, number: int) -> None:
        """The restored trained batch (held by nothing), then one step: sampled, admitted, used, cleared."""
        began = utc_now_iso()
        self.put(self.trajectories(BATCH_ROWS))
        batch = self.trajectories(BATCH_ROWS)
        step = f"verl/{RUN_ID}/step-{number}"
        if self.registry is not None:
            self.registry.admit(step, {TRAIN: batch}, ttl_seconds=600)
        self.put(batch)
        if self.step is not None:
            self.step(began)
        self.tq.kv_clear(batch, TRAIN)
        if self.registry is not None:
            self.registry.release(step)

    def fullest(self) -> tuple[int, int]:
        from tq_gc.stores.transferqueue.storage_units import read_storage_fill

        fill: StorageFill = read_storage_fill(self.tq.get_client())
        unit = max(fill.bounded, key=lambda u: u.active_keys)
        return unit.active_keys, unit.capacity or 0

    def run(self, most_resumes: int) -> Leg:
        leg = Leg()
        for number in range(1, most_resumes + 1):
            try:
                self.resume(number)
            except Exception as exc:  # TQ raises the unit's ValueError wrapped in a RuntimeError
                leg.failure = failed_put(exc)
                leg.fill.append(self.fullest())
                return leg
            leg.resumes = number
            leg.fill.append(self.fullest())
        return leg

    def wipe(self) -> None:
        keys = list(self.tq.kv_list(TRAIN).get(TRAIN, {}))
        if keys:
            self.tq.kv_clear(keys, TRAIN)


class CapacityDemo:
    def __init__(
        self, console: Console, record: Path | None = None, duty_cycle: float = DEFAULT_DUTY_CYCLE
    ) -> None:
        self.console = console
        self.say = Narrator(console).say
        self.record = record
        self.duty_cycle = duty_cycle

    def run(self) -> int:
        # CRITICAL: the failed put the demo shows is logged by TQ as an ERROR, with its traceback.
        holding = f"{CAPACITY_ROWS} rows, {UNITS} storage units"
        with demo_cluster(tq_config(), self.say, holding, tq_log_level="CRITICAL"):
            self.say("up: the job runs, without tq-gc first")
            return self._play()

    def _play(self) -> int:
        from tq_gc.sidecar.client import sidecar_registry, start_sidecar, wait_for_warm_up
        from tq_gc.sidecar.pressure import PressureTiming

        alone = VerlShapedLoop(None).run(most_resumes=CAPACITY_ROWS)
        self.say(f"without tq-gc: {alone.resumes} resumes, then [red]{alone.failure}[/red]")
        VerlShapedLoop(None).wipe()
        config = verl_config()
        handle = start_sidecar(
            config,
            pressure_timing=PressureTiming(interval_seconds=0.5, check_seconds=0.5),
            duty_cycle=self.duty_cycle,
            metrics_port=0,  # any free port: the demo reads what the sidecar reclaimed
        )
        if not wait_for_warm_up(handle):
            self.say("the sidecar is still importing TransferQueue: going on (a slow machine)")
        registry = sidecar_registry()  # the sidecar's, by its fixed name
        registry.admit(f"verl/{RUN_ID}/trainer", {}, ttl_seconds=600)  # the integration's presence
        self._first_sweep(handle)  # the job starts with its sidecar attached, as deploy/ray runs them
        target = 3 * (alone.resumes + 1)
        self.say(f"with the sidecar at verl.yaml (grace {config.grace_seconds:g} s): {target} resumes")
        with_gc = VerlShapedLoop(registry, lambda began: self._sweep_since(handle, began)).run(target)
        with_gc.reclaimed_bytes = reclaimed_bytes(ray_get(handle.status.remote()).get("metrics_port"))
        ray_get(handle.shutdown.remote())
        ok = with_gc.failure is None and with_gc.resumes == target and alone.failure is not None
        self._summary(alone, with_gc, target)
        if self.record is not None:
            self.record.write_text(
                json.dumps({"without": asdict(alone), "with": asdict(with_gc), "target": target})
            )
        return 0 if ok else 1

    def _first_sweep(self, handle: Any) -> None:
        self._sweep_since(handle, "")

    def _sweep_since(self, handle: Any, began: str, deadline_seconds: float = SWEEP_WAIT_SECONDS) -> None:
        """Until the sidecar has completed a sweep that began at or after `began` (UTC ISO, as reports
        have it; "": any)."""
        deadline = time.monotonic() + deadline_seconds
        while time.monotonic() < deadline:
            reports = ray_get(handle.status.remote())["last_reports"]
            if any(r["outcome"] == "completed" and r["started_at"] >= began for r in reports):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the sidecar completed no sweep in {deadline_seconds:g} s")

    def _summary(self, alone: Leg, with_gc: Leg, target: int) -> None:
        from rich.table import Table

        table = Table(
            title=f"a verl-shaped job, {CAPACITY_ROWS}-row TransferQueue, one batch leaked per resume"
        )
        for column in ("", "resumes", "failed put", "fullest unit at the end", "bytes reclaimed"):
            table.add_column(column)
        for name, leg in (("without tq-gc", alone), ("with tq-gc", with_gc)):
            active, capacity = leg.fill[-1] if leg.fill else (0, 0)
            reclaimed = human_bytes(leg.reclaimed_bytes) if leg is with_gc else "-"
            table.add_row(
                name, str(leg.resumes), leg.failure or "none", f"{active}/{capacity} rows", reclaimed
            )
        self.console.print(table)
        verdict = "OK" if with_gc.failure is None and with_gc.resumes == target else "FAILED"
        self.console.print(f"[bold]{verdict}[/bold]: with tq-gc {with_gc.resumes} of {target} resumes")


def failed_put(exc: Exception) -> str:
    """The unit's own words where TQ wrapped them (`Storage capacity exceeded: ...`), else the error."""
    text = str(exc)
    at = text.find("Storage capacity exceeded")
    return text[at:] if at >= 0 else f"{type(exc).__name__}: {text}"


def run_capacity_demo(
    console: Console | None = None, record: Path | None = None, duty_cycle: float = DEFAULT_DUTY_CYCLE
) -> int:
    """The capacity demo; its sidecar presses on the demo's TransferQueue at most `duty_cycle` of the
    time."""
    console = console or Console()
    console.print("[bold]tq-gc demo --capacity[/bold]: a job that dies without tq-gc runs with it")
    return CapacityDemo(console, record, duty_cycle).run()
