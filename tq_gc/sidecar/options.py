"""How a sidecar is started, beside its config: chosen where it starts (`tq-gc serve`'s options,
start_sidecar's keywords), as `tq-gc sweep` chooses --execute for one sweep, not written in the config
(docs/configuration.md, "Renamed and removed keys")."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tq_gc.errors import ConfigError
from tq_gc.wiring import DEFAULT_DUTY_CYCLE, duty_cycle_problem

MAX_PORT = 65535


@dataclass(frozen=True)
class StartOptions:
    """`dry_run`: every sweep of the sidecar is a dry run. `duty_cycle`: the most of the wall time its
    requests to the job's TransferQueue may take. `metrics_port`: where it serves Prometheus metrics (0:
    any free port; None: off). `change_journal`: its sweeps list a swept partition by the change journal
    in the job's controller, re-reading only the rows changed since its last sweep (off by default)."""

    dry_run: bool = False
    duty_cycle: float = DEFAULT_DUTY_CYCLE
    metrics_port: int | None = None
    change_journal: bool = False

    def __post_init__(self) -> None:
        problem = duty_cycle_problem(self.duty_cycle)
        if problem is not None:
            raise ConfigError(f"duty_cycle: {problem}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= MAX_PORT:
            raise ConfigError(
                f"metrics_port: {self.metrics_port} is not a port (0 to {MAX_PORT}; 0: any free)"
            )

    def differing(self, other: StartOptions) -> list[str]:
        """The options `other` chose otherwise, each as `name=this (other: that)`."""
        ours, theirs = asdict(self), asdict(other)
        return [
            f"{name}={ours[name]!r} (this start: {theirs[name]!r})"
            for name in ours
            if ours[name] != theirs[name]
        ]


DEFAULT_START = StartOptions()  # a deleting sidecar at the default duty cycle, no metrics endpoint

__all__ = ["DEFAULT_START", "StartOptions"]
