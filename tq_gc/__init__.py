"""tq-gc: reclaims orphaned TransferQueue rows in RL training jobs, safely and on a schedule.

The public names load on first use (PEP 562): a trainer that imports the kit (GcClient,
AdmissionRegistry, write_manifest) loads redis and tq-gc's own modules, never the sweeper's pydantic
config, APScheduler or Ray."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tq_gc.sidecar.names import SIDECAR_NAME, SIDECAR_RAY_NAMESPACE

if TYPE_CHECKING:
    from tq_gc.config import Config, ConfigLike, load_config
    from tq_gc.errors import (
        CheckpointInProgress,
        ConfigError,
        FenceRaised,
        LeaseLost,
        ReferenceSourceError,
        StoreUnavailable,
        TqGcError,
        TransferQueueNotFound,
    )
    from tq_gc.publish.client import GcClient
    from tq_gc.publish.manifest import write_manifest
    from tq_gc.publish.registry import AdmissionRegistry
    from tq_gc.report import Cause, Outcome, SweepReport
    from tq_gc.sweep import Collector

__version__ = "0.1.0"

# Each public name, and the module it comes from.
_HOMES = {
    "AdmissionRegistry": "tq_gc.publish.registry",
    "Cause": "tq_gc.report",
    "CheckpointInProgress": "tq_gc.errors",
    "Collector": "tq_gc.sweep",
    "Config": "tq_gc.config",
    "ConfigError": "tq_gc.errors",
    "FenceRaised": "tq_gc.errors",
    "GcClient": "tq_gc.publish.client",
    "LeaseLost": "tq_gc.errors",
    "Outcome": "tq_gc.report",
    "ReferenceSourceError": "tq_gc.errors",
    "StoreUnavailable": "tq_gc.errors",
    "SweepReport": "tq_gc.report",
    "TqGcError": "tq_gc.errors",
    "TransferQueueNotFound": "tq_gc.errors",
    "load_config": "tq_gc.config",
    "write_manifest": "tq_gc.publish.manifest",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def start_sidecar(
    config: ConfigLike,
    *,
    dry_run: bool = False,
    duty_cycle: float | None = None,
    metrics_port: int | None = None,
) -> Any:
    """Start the sidecar actor (`tq-gc`, one per Ray cluster) in the current Ray cluster, or return the
    running one (idempotent).

    `config` is a Config, a mapping of its fields, or the path of its YAML file. Chosen here, not in the
    config (as `tq-gc serve`'s options): `dry_run=True`, its sweeps delete nothing; `duty_cycle`, the most
    of the wall time its requests to the job's TransferQueue may take (0 < d <= 1; None: 0.25);
    `metrics_port`, where it serves Prometheus metrics (0: any free port; None: off). Returns the actor's
    handle. (Imported lazily: Ray is slow to import, and publishers need not.)"""
    from tq_gc.sidecar.client import start_sidecar as start

    if duty_cycle is None:  # the default, which lives with the TransferQueue store's pacing
        return start(config, dry_run=dry_run, metrics_port=metrics_port)
    return start(config, dry_run=dry_run, metrics_port=metrics_port, duty_cycle=duty_cycle)


def sidecar_registry(
    name: str = SIDECAR_NAME, namespace: str = SIDECAR_RAY_NAMESPACE, ray_address: str = "auto"
) -> AdmissionRegistry:
    """The admission registry hosted by the running sidecar (state_url memory://), for publishers."""
    from tq_gc.sidecar.client import sidecar_registry as registry

    return registry(name, namespace, ray_address)


__all__ = [
    "AdmissionRegistry",
    "Cause",
    "CheckpointInProgress",
    "Collector",
    "Config",
    "ConfigError",
    "FenceRaised",
    "GcClient",
    "LeaseLost",
    "Outcome",
    "ReferenceSourceError",
    "StoreUnavailable",
    "SweepReport",
    "TqGcError",
    "TransferQueueNotFound",
    "__version__",
    "load_config",
    "sidecar_registry",
    "start_sidecar",
    "write_manifest",
]
