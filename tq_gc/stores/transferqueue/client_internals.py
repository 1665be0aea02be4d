"""The TransferQueue client's internals tq-gc touches, in this process (internals.py has the controller's,
and says which TQ releases they were read from): its version and request types (the version check), its
event loop (every request), the settings the controller publishes (attach) and the storage units'
addresses (storage fill)."""

from __future__ import annotations

from typing import Any


def local_tq_version() -> str:
    """This process's transferqueue version."""
    import transfer_queue

    return str(transfer_queue.__version__)


def local_request_types() -> frozenset[str]:
    """Every request type this process's TQ client may send a controller (and the controller's answers)."""
    from transfer_queue.utils.zmq_utils import ZMQRequestType

    return frozenset(str(member.value) for member in ZMQRequestType)


def client_loop(client: Any) -> Any:
    """The event loop a TransferQueueClient runs its coroutines on (its sync methods submit to it)."""
    return client._loop


def published_client_settings(conf: Any) -> tuple[Any, str, Any]:
    """(the controller's ZMQ info, the storage backend's name, its config) from the config the controller
    publishes (`get_config()`), as TQ's own `_init_from_existing()` reads them."""
    backend = str(conf.backend.storage_backend)
    return conf.controller.zmq_info, backend, conf.backend[backend]


# The ZMQ identity prefix TQ's own metrics collector uses toward the storage units (0.1.11's units drop
# requests from identities without a known prefix; 0.1.9's check none).
METRICS_IDENTITY_PREFIX = "metrics_collector_"


def storage_unit_addresses(client: Any) -> dict[str, str]:
    """{storage unit id: its put/get socket's address} from the client's SimpleStorage manager
    (`storage_manager.storage_unit_infos`, {id: ZMQServerInfo}, `.to_addr("put_get_socket")`: 0.1.9 to
    0.1.11). AttributeError for a backend without storage units."""
    infos = client.storage_manager.storage_unit_infos
    return {str(unit): str(info.to_addr("put_get_socket")) for unit, info in infos.items()}
