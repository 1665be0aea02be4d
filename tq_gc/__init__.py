"""tq-gc: reclaims orphaned TransferQueue rows in RL training jobs, safely and on a schedule."""

from __future__ import annotations

from typing import Any

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


def start_sidecar(config: ConfigLike) -> Any:
    """Start the sidecar actor in the current Ray cluster, or return the running one (idempotent).

    `config` is a Config, a mapping of its fields, or the path of its YAML file. Returns the actor's
    handle. (Imported lazily: Ray is slow to import, and publishers need not.)"""
    from tq_gc.sidecar.client import start_sidecar as start

    return start(config)


def sidecar_registry(
    name: str = "tq-gc", namespace: str = "tq_gc", ray_address: str = "auto"
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
