"""Joining the training job's Ray cluster: one way, for the CLI's row store, the sidecar's driver side and
publishers, so that every refusal reads the same."""

from __future__ import annotations

from tq_gc.config import TransferQueueConfig


def join_ray(address: str, namespace: str | None = None) -> bool:
    """Join the cluster at `address` ('auto', a GCS host:port, or ray://head:10001) unless this process
    is already connected. True if this call connected (the caller then owns the connection).

    Refuses '' and 'local' (ray.init would start a cluster of its own, without the job's TQ), an address
    where nothing answers, and a cluster of another Ray or Python version, each as a ConfigError that says
    what to do."""
    from tq_gc.stores.transferqueue import _connect_ray

    return _connect_ray(TransferQueueConfig(ray_address=address, ray_namespace=namespace))
