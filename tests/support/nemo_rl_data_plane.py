"""NeMo RL's data plane as its recovery points name it (NVIDIA-NeMo/RL, read 2026-12): the partitions,
generation-cut row keys, and `KVBatchMeta` pickled under NeMo's own name,
`nemo_rl.data_plane.interfaces.KVBatchMeta`, so that a file holds exactly what NeMo's does; loading it
back needs `nemo_modules()` (the tests' oracle does). Written from the documented structures, never
from NeMo's code."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch

STAGING = "rollout_staging"
CANONICAL = "rollout_data"
NEMO_MODULE = "nemo_rl.data_plane.interfaces"


@dataclasses.dataclass
class KVBatchMeta:
    """NeMo RL's data-plane batch metadata (nemo_rl/data_plane/interfaces.py), field for field."""

    partition_id: str
    task_name: str | None
    sample_ids: list[str]
    fields: list[str] | None = None
    sequence_lengths: list[int] | None = None
    extra_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    tags: list[dict[str, Any]] | None = None


KVBatchMeta.__module__ = NEMO_MODULE


@contextlib.contextmanager
def nemo_modules() -> Iterator[None]:
    """`nemo_rl.data_plane.interfaces` importable (holding KVBatchMeta) while inside: pickle finds a class
    by its module and name, to write it and to read it back."""
    names = ["nemo_rl", "nemo_rl.data_plane", NEMO_MODULE]
    saved_modules = {name: sys.modules.get(name) for name in names}
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    sys.modules[NEMO_MODULE].KVBatchMeta = KVBatchMeta  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def saved(state: Any) -> bytes:
    buffer = io.BytesIO()
    with nemo_modules():
        torch.save(state, buffer)
    return buffer.getvalue()


def cut_key(checkpoint: str, rollout: str, call: str, seq: int) -> str:
    """A generation-cut chunk row: `__generation_cut__/{checkpoint_id}/{rollout_id}/{model_call_id}/{seq}`."""
    return f"__generation_cut__/{checkpoint}/{rollout}/{call}/{seq}"


HISTOGRAM_MODULE = "wandb.sdk.data_types.histogram"


class Histogram:
    """A stand-in for wandb's `Histogram` (wandb is not installed), pickled under wandb's own module path,
    as NeMo RL's newest finalizer writes it into the replay index's `extra_info["rollout_metrics"]`."""

    def __init__(self, sequence: list[float]) -> None:
        self.histogram = [len(sequence)]
        self.bins = [min(sequence), max(sequence)]
        self._log_type = "histogram"


Histogram.__module__ = HISTOGRAM_MODULE


@contextlib.contextmanager
def importable(module_name: str, **classes: Any) -> Iterator[None]:
    """`module_name` importable (holding `classes`) while inside: pickle finds a class by module and name."""
    parts = module_name.split(".")
    names = [".".join(parts[: depth + 1]) for depth in range(len(parts))]
    assert not any(name in sys.modules for name in names), "a real module of that name is loaded"
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    for name, value in classes.items():
        setattr(sys.modules[module_name], name, value)
    try:
        yield
    finally:
        for name in names:
            del sys.modules[name]


def with_rollout_metrics(index: dict[str, Any]) -> dict[str, Any]:
    """The replay index with NeMo's finalizer's telemetry in each group's `extra_info["rollout_metrics"]`
    (write it inside `importable(HISTOGRAM_MODULE, Histogram=Histogram)`)."""
    for entry in index["groups"]:
        entry["meta"].extra_info["rollout_metrics"] = {"reward": Histogram([0.0, 1.0]), "turns": 3}
    return index
