"""How full the job's TransferQueue storage is: each SimpleStorage unit's capacity and active keys.

A storage unit answers `GET_METRICS` whether TQ's own metrics are on or not (0.1.9 to 0.1.11): its id,
`capacity` (`ceil(total_storage_size / num_units)` rows, None for unlimited) and `active_keys`. It is
served by the unit's one worker thread between the job's puts and gets, and costs it a set's length:
read-only, and each unit is asked once a sweep with a bounded wait (`timeout_seconds`). The request goes
over a socket of tq-gc's own, under the identity prefix TQ's own metrics collector uses (0.1.11's
storage units drop requests from identities they do not know). The internals read are listed in
internals.py.

Backends other than SimpleStorage (Mooncake, Yuanrong, Ray) have no storage units to ask: the fill is
then unread, and says so.
"""

from __future__ import annotations

import uuid
from typing import Any

from tq_gc.footprint import StorageFill, UnitFill
from tq_gc.stores.transferqueue.client_internals import storage_unit_addresses

# The longest tq-gc waits for one unit's answer: a unit busy with a large put answers after it.
UNIT_METRICS_TIMEOUT_SECONDS = 5.0


def read_storage_fill(client: Any, timeout_seconds: float = UNIT_METRICS_TIMEOUT_SECONDS) -> StorageFill:
    """Every storage unit's fill, as the units answer now; a unit that does not answer in time is left
    out and named in `unread`. Never raises."""
    try:
        addresses = storage_unit_addresses(client)
    except Exception as exc:  # another backend, or another layout: nothing to read
        return StorageFill((), f"no storage units to ask ({type(exc).__name__}: {exc})")
    units, missing = [], []
    for unit, address in sorted(addresses.items()):
        answer = _ask_unit(unit, address, timeout_seconds)
        if isinstance(answer, str):
            missing.append(f"{unit}: {answer}")
            continue
        capacity = answer.get("capacity")
        units.append(UnitFill(unit, None if capacity is None else int(capacity), int(answer["active_keys"])))
    return StorageFill(tuple(units), "; ".join(missing) or None)


def _ask_unit(unit: str, address: str, timeout_seconds: float) -> dict[str, Any] | str:
    """The unit's GET_METRICS answer, or why there is none."""
    import zmq
    from transfer_queue.utils.zmq_utils import ZMQMessage, ZMQRequestType

    from tq_gc.stores.transferqueue.client_internals import METRICS_IDENTITY_PREFIX

    context: zmq.Context[Any] = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    try:
        socket.setsockopt(zmq.IDENTITY, f"{METRICS_IDENTITY_PREFIX}tqgc_{uuid.uuid4().hex[:12]}".encode())
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        request = ZMQMessage.create(
            request_type=ZMQRequestType.GET_METRICS, sender_id="tq-gc", body={}, receiver_id=unit
        )
        socket.send_multipart(request.serialize())
        if not socket.poll(int(timeout_seconds * 1000), zmq.POLLIN):
            return f"no answer in {timeout_seconds:g} s"
        answer = ZMQMessage.deserialize(socket.recv_multipart(copy=False))
        body = answer.body
        if not isinstance(body, dict) or "active_keys" not in body:
            return f"unexpected answer {answer.request_type}"
        return body
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        socket.close(linger=0)
