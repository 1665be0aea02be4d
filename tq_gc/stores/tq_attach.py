"""Attaching to a running job's TransferQueue: find its controller by name, and open a client of our own.

Attach, never own (DESIGN.md rule 10). How this module makes sure of it:

- `attach()` looks the controller up by name (`ray.get_actor`) and fails with TransferQueueNotFound
  when it is missing. It never calls `tq.init()`: in a cluster without a controller, `tq.init()` (with
  or without a config) creates a new, empty TQ.
- It builds its own `TransferQueueClient` from the config the controller publishes (what TQ's own
  `_init_from_existing()` does), and leaves TQ's process-global state alone. `_init_from_existing()`
  would record the controller handle in `transfer_queue.interface`, and from then on TQ's
  module-level `close` in this process runs `ray.kill(controller)`: the job's TQ gone. With our own
  client, a stray module-level `close` here has nothing to kill. It also lets `close()` close exactly
  the client we opened,
  and lets every request carry a deadline (TQ's client waits forever on a dead controller).
- `close()` closes that client, and disconnects from Ray only if `attach()` connected this process
  (`ray.shutdown()` ends this driver's connection; the cluster and the job's actors are untouched).
  It never kills an actor.

Reaching the cluster (`transfer_queue.ray_address`): 'auto' (RAY_ADDRESS, else the cluster last started
on this node), a GCS address host:port, or ray://head:10001 (Ray Client: works, but TQ's client then
talks ZMQ to the controller's node directly, so that node must be routable from here). '' and 'local'
are refused: ray.init() would start a cluster of its own. A cluster with token auth needs
RAY_AUTH_MODE=token and the token in tq-gc's environment (Ray reads them; nothing here does).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from tq_gc.errors import StoreUnavailable, TransferQueueNotFound

CONTROLLER_NAME = "TransferQueueController"

CONTROLLER_NAMESPACE = "transfer_queue"

# A controller that exists but has not published its config yet (the job is starting) gets this long.
CONTROLLER_CONFIG_WAIT_SECONDS = 30.0


def find_controller(ray_address: str) -> Any:
    import ray

    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=CONTROLLER_NAMESPACE)
    except ValueError:  # Ray's answer for "no live actor of that name"
        raise TransferQueueNotFound(ray_address) from None
    except Exception as exc:
        raise StoreUnavailable(f"looking up the TransferQueue controller failed: {exc}") from exc


def open_client(controller: Any, request_timeout_seconds: float) -> Any:
    """A TQ client of our own, configured from what the controller publishes (as TQ's attach does).
    `request_timeout_seconds` bounds each read of that config, not the client's later requests."""
    import ray
    from transfer_queue import TransferQueueClient

    deadline = time.monotonic() + CONTROLLER_CONFIG_WAIT_SECONDS
    try:
        conf = ray.get(controller.get_config.remote(), timeout=request_timeout_seconds)
        while conf is None and time.monotonic() < deadline:
            time.sleep(0.5)  # the controller exists but the job's tq.init() has not finished yet
            conf = ray.get(controller.get_config.remote(), timeout=request_timeout_seconds)
    except Exception as exc:
        raise StoreUnavailable(f"reading the TransferQueue controller's config failed: {exc}") from exc
    if conf is None:
        raise StoreUnavailable(
            f"the TransferQueue controller has not published its config after "
            f"{CONTROLLER_CONFIG_WAIT_SECONDS:g} s: is the job still starting?"
        )
    client = None
    try:
        client = TransferQueueClient(
            client_id=f"tq-gc_{os.getpid()}_{uuid.uuid4().hex[:8]}", controller_info=conf.controller.zmq_info
        )
        backend = conf.backend.storage_backend
        # kv_clear clears the storage units too, so the client needs the job's storage manager.
        client.initialize_storage_manager(manager_type=backend, config=conf.backend[backend])
    except Exception as exc:
        if client is not None:
            client.close()
        raise StoreUnavailable(f"connecting to the TransferQueue controller failed: {exc}") from exc
    return client
