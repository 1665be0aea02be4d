"""Attaching from a process whose Ray differs from the cluster's fails at once with a ConfigError naming
both versions and the rebuild, through a GCS address and through Ray Client, and leaves no connection.

The cluster and Ray's own version check are real; the joining process reports another Ray version
(`ray.__version__`, what Ray compares), as an image built with another RAY_VERSION would."""

from __future__ import annotations

import json
import platform
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.ray

OTHER_RAY = "2.0.0"


def test_a_process_with_another_ray_is_refused_with_the_versions_and_the_rebuild(
    ray_cluster: Any, run_python: Callable[..., Any]
) -> None:
    code = textwrap.dedent(f"""
        import json, ray
        ray.__version__ = {OTHER_RAY!r}
        from tq_gc.config import TransferQueueConfig
        from tq_gc.errors import ConfigError
        from tq_gc.stores.transferqueue import TransferQueueRowStore
        report = {{}}
        for how, address in (("gcs", {ray_cluster.address!r}), ("client", {ray_cluster.client_address!r})):
            try:
                TransferQueueRowStore.attach(TransferQueueConfig(ray_address=address))
                report[how] = "attached"
            except ConfigError as exc:
                report[how] = str(exc)
            report[how + "_connected_after"] = ray.is_initialized()
        print(json.dumps(report))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    import ray

    for how in ("gcs", "client"):
        message = report[how]
        assert f"runs Ray {ray.__version__} on Python {platform.python_version()}" in message, message
        assert f"here runs Ray {OTHER_RAY}" in message, message
        assert f"--build-arg RAY_VERSION={ray.__version__}" in message, message
        assert report[how + "_connected_after"] is False
