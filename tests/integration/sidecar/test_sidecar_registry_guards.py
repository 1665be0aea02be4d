"""The registry the sidecar hosts checks what it is sent, however it is called; and a sidecar name already
taken by a sidecar started with another config is refused instead of handing back that one."""

from __future__ import annotations

import pytest
import ray

from tq_gc.errors import TqGcError
from tq_gc.sidecar.client import start_sidecar

from .helpers import MakeConfig, StartSidecar, call, name_of

pytestmark = pytest.mark.ray

ROWS = {"rollout_staging": ["r1/c1"]}


BAD_CALLS = [
    ("admit", ("", ROWS, 60_000), "admission_id must be a non-empty string"),
    ("admit", (7, ROWS, 60_000), "admission_id must be a non-empty string"),
    ("admit", ("a", {"rollout_staging": "r1/c1"}, 60_000), r"must be a list of keys"),
    ("admit", ("a", {"rollout_staging": ["k", 3]}, 60_000), "every key must be a non-empty string"),
    ("admit", ("a", ["rollout_staging", "k"], 60_000), "rows must be a mapping"),
    ("admit", ("a", ROWS, 0), "ttl_ms must be a positive whole number"),
    ("admit", ("a", ROWS, "600"), "ttl_ms must be a positive whole number"),
    ("admit", ("a", ROWS, 1.5), "ttl_ms must be a positive whole number"),
    ("renew_admission", ("", 60_000), "admission_id must be a non-empty string"),
    ("renew_admission", ("a", -1), "ttl_ms must be a positive whole number"),
    ("release_admission", ("",), "admission_id must be a non-empty string"),
    ("raise_fence", ("", 60_000), "fence name must be a non-empty string"),
    ("raise_fence", ("ckpt", True), "ttl_ms must be a positive whole number"),
    ("lower_fence", (None,), "fence name must be a non-empty string"),
]


def test_the_actor_refuses_bad_input_called_directly(make_config: MakeConfig, sidecar: StartSidecar) -> None:
    """Any Ray process can call the actor's methods, not only AdmissionRegistry: each checks its input."""
    handle = sidecar(make_config(schedule={"interval_seconds": 3600}))
    for method, args, message in BAD_CALLS:
        with pytest.raises(ValueError, match=message):
            call(handle, method, *args)
    assert call(handle, "live_admissions") == {}
    assert call(handle, "live_fences") == {}
    call(handle, "admit", "good", ROWS, 60_000)  # and good input still goes through
    assert call(handle, "live_admissions") == {"good": ROWS}


def test_a_sidecar_name_taken_by_one_with_another_config_is_refused_clearly(
    make_config: MakeConfig, sidecar: StartSidecar
) -> None:
    first_config = make_config(schedule={"interval_seconds": 3600})
    first = sidecar(first_config)
    name = name_of(first)
    call(first, "admit", "held", ROWS, 60_000)
    # Another job (another tq-gc namespace) in the same Ray cluster: the same sidecar name (one per cluster).
    second_config = make_config(schedule={"interval_seconds": 3600})
    assert second_config.namespace != first_config.namespace

    with pytest.raises(TqGcError, match="already runs") as caught:
        start_sidecar(second_config, name=name)
    message = str(caught.value)
    assert name in message and "namespace" in message and "memory://" in message
    assert "one sidecar per Ray cluster" in message and "stop that one first" in message

    assert call(first, "status")["namespace"] == first_config.namespace, "the running sidecar is untouched"
    assert call(first, "live_admissions") == {"held": ROWS}
    named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == name]
    assert len(named) == 1
