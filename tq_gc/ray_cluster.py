"""Joining the training job's Ray cluster: one way, for the CLI's row store, the sidecar's driver side and
publishers, so that every refusal reads the same and says what to do."""

from __future__ import annotations

import logging
import re
import socket
from typing import Any
from urllib.parse import urlsplit

from tq_gc.errors import ConfigError
from tq_gc.redaction import redact_text, redact_url

# ray.init() against an address where nothing listens retries for minutes; a TCP probe answers at once.
GCS_PROBE_TIMEOUT_SECONDS = 5.0


def join_ray(ray_address: str, namespace: str | None = None) -> bool:
    """Join the cluster at `ray_address` ('auto', a GCS host:port, or ray://head:10001) unless this
    process is already connected. True if this call connected (the caller then owns the connection).

    Refuses '' and 'local' (ray.init would start a cluster of its own, without the job's TQ), an address
    where nothing answers, and a cluster of another Ray or Python version, each as a ConfigError that
    says what to do."""
    import ray

    address = ray_address.strip()
    if address in ("", "local"):
        # ray.init() with no address or "local" starts a new cluster of its own: never what we want.
        raise ConfigError(
            f"transfer_queue.ray_address={redact_url(ray_address)!r} would start a new Ray cluster: "
            "tq-gc joins the training job's. Use 'auto' on a node of that cluster, its GCS address "
            "(host:6379), or ray://head:10001"
        )
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"namespace": namespace}
    if "://" not in address:
        address = _reachable_gcs(address)
        kwargs.update(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        _init_with_a_second_client_session(address, kwargs)
    except Exception as exc:
        if ray.is_initialized():
            ray.shutdown()
        mismatch = _version_mismatch(ray_address, str(exc))
        raise ConfigError(mismatch or _unreachable(ray_address, str(exc))) from exc
    return True


def _init_with_a_second_client_session(address: str, kwargs: dict[str, Any]) -> None:
    import ray

    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:
        if not _client_session_refused(address, str(exc)):
            raise
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=address, **kwargs)


def _client_session_refused(address: str, ray_error: str) -> bool:
    """Ray Client's server could not start this client's session. Another Ray version can cause it, but
    so can the proxier's own races under load (its per-client server seen as a zombie, for one): worth
    a second try, which then reaches Ray's version check or joins."""
    refused_by = "Initialization failure from server"  # ray.util.client.worker, Ray Client's session start
    return address.startswith("ray://") and refused_by in ray_error


def _version_mismatch(address: str, ray_error: str) -> str | None:
    """What to do when Ray would not join a cluster of another Ray or Python version, or None when
    `ray_error` is not that. Ray says it two ways: its version check (ray._private.utils.check_version_info,
    for a GCS address and for Ray Client) names both sides' versions; but before that check runs, a Ray
    Client server of another Ray version often fails to read the session's pickled JobConfig
    ("Initialization failure from server": a Ray 2.59 client on a 2.60 cluster, for one)."""
    import platform

    import ray

    versions = re.search(
        r"cluster was started with:\s+Ray: (\S+)\s+Python: (\S+)\s+"
        r"This process .*? was started with:\s+Ray: (\S+)\s+Python: (\S+)",
        ray_error,
        re.DOTALL,
    )
    if versions is not None:
        cluster_ray, cluster_python, our_ray, our_python = versions.groups()
        return (
            f"the Ray cluster at transfer_queue.ray_address={redact_url(address)!r} runs Ray {cluster_ray} "
            "on Python "
            f"{cluster_python}; tq-gc here runs Ray {our_ray} on Python {our_python}. Ray joins only the "
            "same Ray version and Python version (the same minor through ray://): rebuild the tq-gc image "
            f"with --build-arg RAY_VERSION={cluster_ray} "
            f"--build-arg PYTHON_IMAGE=python:{cluster_python}-slim (outside the image: "
            f"RAY_VERSION={cluster_ray} scripts/install.sh, with Python {cluster_python})"
        )
    client_session_refused = _client_session_refused(address, ray_error)
    if "Version mismatch" not in ray_error and not client_session_refused:
        return None
    detail = ray_error.strip().splitlines()[-1] if client_session_refused else ray_error.strip()
    detail = redact_text(detail, [address])
    return (
        f"the Ray cluster at transfer_queue.ray_address={redact_url(address)!r} refused tq-gc ({detail}): "
        "that is how "
        f"it refuses another Ray or Python version, and tq-gc here runs Ray {ray.__version__} on Python "
        f"{platform.python_version()}. Check the cluster's (`ray --version` and `python --version` on its "
        "head) and rebuild the tq-gc image with --build-arg RAY_VERSION=<its Ray> "
        "--build-arg PYTHON_IMAGE=python:<its Python>-slim"
    )


def _reachable_gcs(address: str) -> str:
    """Resolve `address` ('auto' or host:port) as ray.init would, and check that something listens."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        gcs_address = canonicalize_bootstrap_address_or_die(address)
    except Exception as exc:  # ConnectionError: 'auto' found no cluster; ValueError: bad format
        raise ConfigError(_unreachable(address, str(exc))) from exc
    parts = urlsplit(f"//{gcs_address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise ConfigError(_unreachable(address, f"{gcs_address!r} is not host:port"))
    try:
        with socket.create_connection((host, port), timeout=GCS_PROBE_TIMEOUT_SECONDS):
            pass
    except OSError as exc:
        raise ConfigError(_unreachable(address, f"nothing answers at {gcs_address} ({exc})")) from exc
    return gcs_address


def _unreachable(address: str, detail: str) -> str:
    detail = redact_text(detail, [address])  # Ray's own words may quote the address
    return (
        f"cannot reach a Ray cluster at transfer_queue.ray_address={redact_url(address)!r}: {detail}. "
        "Start the training job first, or set ray_address to its cluster: 'auto' on one of its nodes, "
        "the GCS address (host:6379), or ray://head:10001"
    )
