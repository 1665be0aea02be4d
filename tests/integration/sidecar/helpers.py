"""Small helpers for the sidecar tests: calling the actor, polling, reading TQ and /metrics."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import harness
import ray
from prometheus_client.parser import text_string_to_metric_families

from tq_gc.config import Config

GRACE_S = 1.5  # sidecar tests' grace and schedule: seconds, so that each test takes seconds
INTERVAL_S = 0.5
WAIT_S = 20.0

MakeConfig = Callable[..., Config]  # the make_config fixture
StartSidecar = Callable[..., Any]  # the sidecar fixture
RecordTiming = Callable[[str, float], None]  # tests/support/ray_fixtures.py's record_timing fixture


def call(handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    return ray.get(getattr(handle, method).remote(*args, **kwargs), timeout=60)


def wait_until(what: str, predicate: Callable[[], Any], timeout_seconds: float = WAIT_S) -> Any:
    """Poll `predicate` until it returns something truthy, and return that."""
    return harness.wait_until(what, predicate, timeout_seconds)


def name_of(handle: Any) -> str:
    """The sidecar's actor name (each test's sidecar has its own)."""
    return str(call(handle, "status")["name"])


def reports(handle: Any) -> list[dict[str, Any]]:
    """The sidecar's recent reports, oldest first."""
    return list(reversed(call(handle, "status")["last_reports"]))


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics over HTTP: {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
