"""The public Python API (tq_gc/__init__.py; the README and docs/integrations.md show it) is a contract:
a change to it must be a decision, not an accident."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

import tq_gc
from tq_gc import AdmissionRegistry, ConfigError
from tq_gc.config import as_config


def test_all_is_pinned() -> None:
    assert sorted(tq_gc.__all__) == [
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


def test_a_config_may_be_given_as_a_value_a_mapping_or_a_yaml_path(tmp_path: Path) -> None:
    fields = {"namespace": "job-42", "scope": [{"partition": "rollout_staging", "all_keys": True}]}
    path = tmp_path / "gc.yaml"
    path.write_text(yaml.safe_dump(fields))
    config = as_config(fields)
    assert config.namespace == "job-42"
    assert as_config(config) is config
    assert as_config(path) == as_config(str(path)) == config
    with pytest.raises(ConfigError, match="unknown key"):
        as_config({**fields, "grace": 5})
