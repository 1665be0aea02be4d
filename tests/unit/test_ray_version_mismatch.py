"""A Ray or Python version that differs from the cluster's is a config error that says both versions and how
to rebuild. The refusals here are Ray's own, from the function Ray runs when joining a cluster."""

from __future__ import annotations

import platform

import pytest
import ray
from ray._private.utils import check_version_info

from tq_gc.ray_cluster import _version_mismatch


def ray_refusal(cluster_ray: str, cluster_python: str, joined_through: str) -> str:
    """Ray's error for joining a cluster started with these versions, as a GCS join or Ray Client says it."""
    cluster = {"ray_version": cluster_ray, "python_version": cluster_python}
    with pytest.raises(RuntimeError) as refused:
        check_version_info(cluster, joined_through, True, python_version_match_level="minor")
    return str(refused.value)


@pytest.mark.parametrize(
    ("cluster_ray", "cluster_python"),
    [("2.49.0", platform.python_version()), (ray.__version__, "3.12.4"), ("2.49.0", "3.12.4")],
)
@pytest.mark.parametrize("joined_through", ["Ray Client", "node 10.0.0.7"])
def test_a_version_mismatch_names_both_versions_and_the_rebuild(
    cluster_ray: str, cluster_python: str, joined_through: str
) -> None:
    message = _version_mismatch("ray://head:10001", ray_refusal(cluster_ray, cluster_python, joined_through))
    assert message is not None
    assert "transfer_queue.ray_address='ray://head:10001'" in message
    assert f"runs Ray {cluster_ray} on Python {cluster_python}" in message
    assert f"here runs Ray {ray.__version__} on Python {platform.python_version()}" in message
    assert f"--build-arg RAY_VERSION={cluster_ray}" in message
    assert f"--build-arg PYTHON_IMAGE=python:{cluster_python}-slim" in message


# What `ray.init("ray://...")` raised from an image with Ray 2.59.0 joining a Ray 2.60.0 cluster (built and
# run for real with Podman): the server failed on the client's pickled JobConfig before any version check.
CLIENT_SESSION_REFUSED = """Initialization failure from server:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/ray/util/client/server/proxier.py", line 765, in Datapath
    if not self.proxy_manager.start_specific_server(
  File "/venv/lib/python3.11/site-packages/ray/job_config.py", line 261, in _get_proto_job_config
    self._disable_job_level_lineage_reconstruction
AttributeError: 'JobConfig' object has no attribute '_disable_job_level_lineage_reconstruction'
"""


def test_a_ray_client_session_refused_by_a_cluster_of_another_ray_says_how_to_rebuild() -> None:
    message = _version_mismatch("ray://head:10001", CLIENT_SESSION_REFUSED)
    assert message is not None
    assert "'JobConfig' object has no attribute" in message
    assert f"here runs Ray {ray.__version__} on Python {platform.python_version()}" in message
    assert "--build-arg RAY_VERSION=<its Ray>" in message and "ray --version" in message


def test_a_refused_session_through_a_gcs_address_is_not_read_as_a_version_mismatch() -> None:
    assert _version_mismatch("10.0.0.7:6379", CLIENT_SESSION_REFUSED) is None


def test_a_refusal_worded_otherwise_still_says_how_to_rebuild() -> None:
    refusal = "RuntimeError: Version mismatch: the cluster runs Ray 3.0 (new wording)"
    message = _version_mismatch("auto", refusal)
    assert message is not None
    assert "Ray 3.0 (new wording)" in message
    assert "RAY_VERSION" in message and "PYTHON_IMAGE" in message


def test_other_ray_errors_are_not_a_version_mismatch() -> None:
    assert _version_mismatch("auto", "ConnectionError: Could not find any running Ray instance.") is None
