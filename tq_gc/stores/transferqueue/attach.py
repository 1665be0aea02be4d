"""Attaching to a running job's TransferQueue: find its controller by name, and open a client of our own.

Attach, never own (docs/safety.md, rule 11). How this module makes sure of it:

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
- Before any request, it probes the controller (internals.controller_probe): which of the functions
  tq-gc runs inside it fit, and which TQ it runs. A controller of another TQ than this process's is
  refused (ConfigError, exit 2, naming both versions): TQ's client and controller speak one wire
  protocol, and a request the controller cannot decode kills its request thread (0.1.9's), the job's TQ
  with it.
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
from collections.abc import Callable
from typing import Any

from tq_gc.errors import ConfigError, StoreUnavailable, TransferQueueNotFound
from tq_gc.redaction import redact_url
from tq_gc.stores.transferqueue.client_internals import (
    local_request_types,
    local_tq_version,
    published_client_settings,
)
from tq_gc.stores.transferqueue.controller_fit import ControllerFit
from tq_gc.stores.transferqueue.internals import Probe, controller_probe

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


def controller_instance(controller: Any, request_timeout_seconds: float) -> str:
    """Which controller `controller` is: its Ray actor id and its process (a controller the job made
    anew, or the same actor restarted by Ray, answers another). Read through Ray beside the request
    thread. StoreUnavailable when it does not answer (dead)."""
    import ray

    try:
        answer = controller.__ray_call__.remote(_instance_reader())
        return str(ray.get(answer, timeout=request_timeout_seconds))
    except Exception as exc:
        raise StoreUnavailable(f"the TransferQueue controller does not answer: {exc}") from exc


def _instance_reader() -> Callable[[Any], str]:
    """A closure (shipped by value: the controller's process need not have tq-gc) that names the
    controller instance it runs in."""

    def read_instance(controller: Any) -> str:
        import os

        import ray

        return f"{ray.get_runtime_context().get_actor_id()}/{os.getpid()}/{id(controller)}"

    return read_instance


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
        zmq_info, backend, backend_config = published_client_settings(conf)
        client_id = f"tq-gc_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        client = TransferQueueClient(client_id=client_id, controller_info=zmq_info)
        # kv_clear clears the storage units too, so the client needs the job's storage manager.
        client.initialize_storage_manager(manager_type=backend, config=backend_config)
    except Exception as exc:
        if client is not None:
            client.close()
        raise StoreUnavailable(f"connecting to the TransferQueue controller failed: {exc}") from exc
    return client


def probe_controller(
    controller: Any, request_timeout_seconds: float, probe: Probe | None = None
) -> ControllerFit:
    """What the controller has (`probe`, default internals.controller_probe()), read through Ray beside
    its request thread.
    A probe that fails inside the controller knows nothing (each function is then tried, and falls back
    on its first misfit); one that gets no answer is StoreUnavailable."""
    import ray

    try:
        answer = controller.__ray_call__.remote(probe or controller_probe())
        found = ray.get(answer, timeout=request_timeout_seconds)
    except ray.exceptions.GetTimeoutError as exc:
        raise StoreUnavailable(
            f"probing the TransferQueue controller: no answer within {request_timeout_seconds:g} s"
        ) from exc
    except ray.exceptions.RayActorError as exc:
        raise StoreUnavailable(f"probing the TransferQueue controller failed: {exc}") from exc
    except Exception as exc:  # the probe itself did not run there
        return ControllerFit.unknown(f"{type(exc).__name__}: {exc}")
    return ControllerFit.from_probe(found)


def refuse_another_tq(fit: ControllerFit, ray_address: str) -> None:
    """ConfigError (exit 2) if the controller runs another TQ than this process, or cannot decode requests
    this process's client sends; nothing if it can tell no difference."""
    mismatch = another_tq(fit, local_tq_version(), local_request_types(), ray_address)
    if mismatch is not None:
        raise ConfigError(mismatch)


def another_tq(fit: ControllerFit, ours: str, our_requests: frozenset[str], ray_address: str) -> str | None:
    """What to do when the controller's TQ is not ours (pure: `ours` and `our_requests` are this process's
    TQ version and request types), or None when no difference shows."""
    theirs = fit.tq_version
    unknown = set() if fit.request_types is None else our_requests - fit.request_types
    if (theirs is None or theirs == ours) and not unknown:
        return None
    cannot_decode = f" (it cannot decode {', '.join(sorted(unknown))})" if unknown else ""
    version = theirs or "of unknown version"
    rebuild = theirs or "<the job's>"
    return (
        f"the TransferQueue controller at transfer_queue.ray_address={redact_url(ray_address)!r} runs "
        "transferqueue "
        f"{version}; tq-gc here runs transferqueue {ours}{cannot_decode}. tq-gc's client must be the "
        "controller's TQ: its requests are decoded by the job's controller, and one it cannot decode "
        f"can stop the controller's request thread. Rebuild the tq-gc image with --build-arg "
        f"TQ_VERSION={rebuild} (outside the image: TQ_VERSION={rebuild} scripts/install.sh, or pip "
        f"install transferqueue=={rebuild}). Nothing was sent to the controller."
    )
