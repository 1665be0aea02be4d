"""tq-gc: reclaims orphaned TransferQueue rows in RL training jobs, safely and on a schedule."""

from __future__ import annotations

from typing import Any

from tq_gc.collector import Collector
from tq_gc.config import Config, load_config
from tq_gc.model import Cause, Outcome, SweepReport
from tq_gc.references.admissions import AdmissionRegistry
from tq_gc.trainer import GcClient

__version__ = "0.1.0"


def start_sidecar(config: Config) -> Any:
    """Start the sidecar actor in the current Ray cluster, or return the running one (idempotent).

    Returns its Ray actor handle."""
    from tq_gc.sidecar_client import start_sidecar as start

    return start(config)


__all__ = [
    "AdmissionRegistry",
    "Cause",
    "Collector",
    "Config",
    "GcClient",
    "Outcome",
    "SweepReport",
    "__version__",
    "load_config",
    "start_sidecar",
]
