"""The public Python API is a contract (DESIGN.md): a change to it must be a decision, not an accident."""

from __future__ import annotations

import inspect

import tq_gc
from tq_gc import AdmissionRegistry


def test_all_is_pinned() -> None:
    assert sorted(tq_gc.__all__) == [
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
    for name in tq_gc.__all__:
        assert hasattr(tq_gc, name), name


def test_admission_registry_has_the_designed_methods() -> None:
    methods = {
        "connect",
        "admit",
        "renew",
        "release",
        "admission",
        "live",
        "fence",
        "unfence",
        "checkpoint_fence",
    }
    assert methods <= {name for name, _ in inspect.getmembers(AdmissionRegistry)}
    assert list(inspect.signature(AdmissionRegistry.admit).parameters) == [
        "self",
        "admission_id",
        "rows",
        "ttl_seconds",
    ]
