"""Sidecar fixtures: a config maker, and sidecars that are always shut down and killed.

Ray and the TransferQueue come from tests/support/ray_fixtures.py (this pytest process plays the
training job). Every sidecar gets a name of its own (start_sidecar's test-only `name`), so a test never
finds another test's actor.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import ray.cloudpickle

from tq_gc.config import Config, parse_config
from tq_gc.sidecar.client import start_sidecar, stop_sidecar
from tq_gc.sidecar.pressure import FIXED_PRESSURE_TIMING, PressureTiming
from tq_gc.wiring import RowStoreFactory

from . import remote_side
from .helpers import GRACE_S, INTERVAL_S, MakeConfig, RecordTiming, StartSidecar

# The factories run inside the sidecar's Ray worker, which cannot import this test package by name:
# ship the module's code with the pickled factory instead.
ray.cloudpickle.register_pickle_by_value(remote_side)  # type: ignore[no-untyped-call]


@pytest.fixture
def make_config(ray_cluster: Any, tq: Any, tq_partition: str) -> MakeConfig:
    """make_config(state_url="memory://", **overrides): a sidecar config for the test's partition,
    with a seconds-long grace and schedule."""

    def make(state_url: str = "memory://", **overrides: Any) -> Config:
        values: dict[str, Any] = {
            "namespace": f"sidecar-{uuid.uuid4().hex[:8]}",
            "state_url": state_url,
            "transfer_queue": {"ray_address": ray_cluster.address},
            "scope": [{"partition": tq_partition, "all_keys": True}],
            "grace_seconds": GRACE_S,
            "allow_short_grace": True,
            "limits": {"max_delete_fraction": 1.0},
            "schedule": {"interval_seconds": INTERVAL_S},
        }
        for key, value in overrides.items():
            values[key] = {**values.get(key, {}), **value} if isinstance(value, dict) else value
        return parse_config(values, origin="sidecar test")

    return make


@pytest.fixture
def sidecar(record_timing: RecordTiming) -> Iterator[StartSidecar]:
    """sidecar(config, row_store_factory=None, pressure_timing=the fixed one, name=a fresh one, **options)
    -> handle, options being start_sidecar's (dry_run, duty_cycle, metrics_port); every sidecar started
    is shut down and killed at the end of the test, whatever happened."""
    handles: list[Any] = []

    def start(
        config: Config,
        row_store_factory: RowStoreFactory | None = None,
        pressure_timing: PressureTiming = FIXED_PRESSURE_TIMING,
        *,
        name: str | None = None,
        **options: Any,
    ) -> Any:
        started = time.monotonic()
        name = name or f"tq-gc-test-{uuid.uuid4().hex[:8]}"
        handle = start_sidecar(config, row_store_factory, pressure_timing, name=name, **options)
        record_timing("start_sidecar (actor up, TQ attached)", time.monotonic() - started)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        started = time.monotonic()
        stop_sidecar(handle, timeout_seconds=10)
        record_timing("stop_sidecar (shutdown + kill)", time.monotonic() - started)
