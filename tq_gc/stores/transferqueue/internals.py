"""Every TransferQueue internal tq-gc touches, in one place: check the next TQ release here.

Read from the published wheels of transferqueue 0.1.9, 0.1.10 and 0.1.11 (`READ_FROM`; NeMo RL pins
0.1.9, verl 0.9.1 asks for >= 0.1.10). Public calls (`kv_retrieve_meta`, `kv_retrieve_keys`,
`clear_samples`, `get_partition_list`, `kv_list`, `BatchMeta`) are not listed; everything else is:

Present with the same shape in all three unless said otherwise:
- `controller.index_manager.global_index_counter` (int), `.partition_to_indexes` ({pid: set}): index pages
- `controller.partitions[pid].revert_keys_mapping` ({index: key}): key windows; `.keys_mapping`
  ({key: index}): the probe's check of what they mean
- `controller.partitions[pid].field_metadata` ({field: FieldMeta with global_indexes, dtype, shape,
  is_nested, is_non_tensor, per_sample_shapes}) and `.field_custom_backend_meta` ({index: {field:
  meta}}, Mooncake's `packed_size`): rows' bytes, read in the key windows (a layout that does not fit
  leaves sizes unknown, never the keys)
- `controller.process_request_thread` (a Thread), and its function that calls
  `request_handle_socket.recv_multipart`: `_process_request` in 0.1.9, `_process_request_loop` in 0.1.10
  and 0.1.11 (a wrapper `_process_request` restarts it after an error): quiet waits
- `controller.get_partition_index_range(pid)` (a Ray method of the actor): the index pages' fallback
- `controller.get_config()` -> `.controller.zmq_info`, `.backend.storage_backend`, `.backend[name]`;
  `TransferQueueClient(client_id, controller_info)`, `.initialize_storage_manager(manager_type, config)`
  (what TQ's own `_init_from_existing()` does): attach; the client's event loop `._loop`: every request
- `transfer_queue.__version__`, `transfer_queue.utils.zmq_utils.ZMQRequestType`: the version check
- the client's `storage_manager.storage_unit_infos` ({unit id: ZMQServerInfo}), a unit's `GET_METRICS` answer
  (`capacity`, `active_keys`), `ZMQMessage`: storage fill (storage_units.py)
- the loop's local `request_msg` (`request_id`, `sender_id`) while it waits: the job's idleness (quiet.py)

The client's side of these (this process's TQ) is read in client_internals.py.

The functions run inside the controller (through Ray's `__ray_call__`) are closures made here, so that
Ray ships their code by value: the controller's process need not have tq-gc installed. They read and
never write. `controller_probe()` runs once at attach and checks the shapes the others rely on, and that
their answers mean what they meant in the versions above (the two key maps agree, a key's index is its
partition's and below the counter): a function whose shape does not fit is not used, and tq-gc takes
TQ's public call instead (controller_function.py). The version check compares the controller's TQ with
this process's: TQ's client and controller speak one wire protocol (0.1.10's client sends a
MARK_CLEARING request before each clear, which a 0.1.9 controller cannot decode: its request thread
dies), so a client of another TQ is refused before its first request (attach.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tq_gc.stores.transferqueue.field_sizes import row_bytes_reader

# The TQ releases whose code the functions below were read from, oldest first (CI tests each).
READ_FROM = ("0.1.9", "0.1.10", "0.1.11")

# The functions run inside the controller, by the name `tq-gc check` and the metrics give them.
INDEX_PAGES = "index pages"
KEY_WINDOWS = "key windows"
QUIET_WAITS = "quiet waits"
CONTROLLER_FUNCTIONS = (INDEX_PAGES, KEY_WINDOWS, QUIET_WAITS)

# The request thread's function around `recv_multipart`, newest layout first: 0.1.10 and 0.1.11 wrap the
# loop in `_process_request_loop` (restarted by `_process_request` after an error); 0.1.9 loops in
# `_process_request` itself.
REQUEST_LOOPS = ("_process_request_loop", "_process_request")

# The probe's look at the key maps: the newest keys of the newest partitions with keys (bounded work
# on the controller's GIL, whatever the partition's size).
PROBE_KEYS = 64
PROBE_PARTITIONS = 8

# (controller, partition, start, stop) -> (end of the index space, the partition's size, its indexes in
# [start, min(stop, end)), ascending)
PageReader = Callable[[Any, str, int, int], tuple[int, int, list[int]]]

# (controller, partition, global indexes) -> (the key of each index, None where it has none (every one, in
# a partition the controller does not have); the bytes of each index's row where the controller's field
# metadata tells (-1 where it does not), or None where that metadata does not fit: see row_bytes_reader).
KeysReader = Callable[[Any, str, Sequence[int]], tuple[list[str | None], list[int] | None]]

# (controller, quiet seconds, most seconds to wait, seconds between looks, the job's idleness) -> (seconds
# waited, whether the request thread was idle that long, the request it served last, the seconds the
# job has been idle): request_thread_watch()
RequestThreadWatch = Callable[..., tuple[float, bool, "str | None", float]]

# controller -> what controller_probe() found (see there)
Probe = Callable[[Any], dict[str, Any]]


def page_reader() -> PageReader:
    """Which indexes of one span of the global index space are the partition's, by membership in TQ's own
    index set (a defaultdict's `get` adds no partition)."""

    def read_page(controller: Any, partition: str, start: int, stop: int) -> tuple[int, int, list[int]]:
        manager = controller.index_manager
        end = int(manager.global_index_counter)
        owned = manager.partition_to_indexes.get(partition, ())
        return end, len(owned), [index for index in range(start, min(stop, end)) if index in owned]

    return read_page


def keys_reader() -> KeysReader:
    """The key of each global index, from TQ's own {global index: key} map (what `kv_retrieve_keys` reads);
    `dict.get` adds nothing. And in the same call, each row's bytes (row_bytes_reader()): the listing reads
    sizes with no pass of its own over the controller."""
    read_bytes = row_bytes_reader()

    def read_keys(
        controller: Any, partition: str, indexes: Sequence[int]
    ) -> tuple[list[str | None], list[int] | None]:
        status = controller.partitions.get(partition)
        if status is None:  # gone: so are its rows
            return [None] * len(indexes), None
        owners = status.revert_keys_mapping
        keys = [owners.get(index) for index in indexes]
        try:
            sizes = read_bytes(status, indexes)
        except Exception:  # another layout of the field metadata: sizes unknown, keys still good
            sizes = None
        return keys, sizes

    return read_keys


def request_thread_watch() -> RequestThreadWatch:
    """Wait until the request thread has waited for a request (`recv_multipart` called from TQ's request
    loop, REQUEST_LOOPS) for `quiet_seconds`, or `max_wait_seconds` at most. Reads which function that
    thread is in (`sys._current_frames()`) and its loop's `request_msg` (the request it served last: id,
    sender), nothing else. A thread waiting anywhere else raises KeyError: the wait does not fit.

    `idle`: (the request served last at tq-gc's previous quiet moment, tq-gc's client id, the job's
    idleness by then and since, the idleness that ends the wait). While the request served last is that
    one or tq-gc's own, the job made none; idle that long, the wait returns. Answers (seconds waited,
    found, the request served last where found, the seconds the job has been idle (else 0))."""
    loops = REQUEST_LOOPS

    def wait_quiet(
        controller: Any,
        quiet_seconds: float,
        max_wait_seconds: float,
        sample_seconds: float,
        idle: tuple[str | None, str, float, float] | None = None,
    ) -> tuple[float, bool, str | None, float]:
        import sys
        import time

        def served_last(frame: Any) -> tuple[str | None, str | None]:
            request = frame.f_back.f_locals.get("request_msg")
            return getattr(request, "request_id", None), getattr(request, "sender_id", None)

        thread_id = controller.process_request_thread.ident
        started = time.monotonic()
        seen_last, own_sender, idle_seconds, idle_enough = idle or (None, "", 0.0, 0.0)
        idle_frame, idle_since = None, started
        job_idle_since = None if idle is None else started - idle_seconds
        while True:
            frame = sys._current_frames().get(thread_id)
            now = time.monotonic()
            if frame is None or frame.f_code.co_name != "recv_multipart":
                idle_frame = None  # serving a request
            elif frame is not idle_frame:  # a new wait for a request: the one before was served
                if frame.f_back is None or frame.f_back.f_code.co_name not in loops:
                    raise KeyError("the request thread waits outside TQ's request loop")
                idle_frame, idle_since = frame, now
                if job_idle_since is not None:
                    last, sender = served_last(frame)
                    if last is None or (last != seen_last and sender != own_sender):
                        job_idle_since = None  # the job's request
            if idle_frame is not None:
                if job_idle_since is not None and now - job_idle_since >= idle_enough:
                    return now - started, True, served_last(idle_frame)[0], now - job_idle_since
                if now - idle_since >= quiet_seconds:
                    since = idle_since if job_idle_since is None else min(idle_since, job_idle_since)
                    return now - started, True, served_last(idle_frame)[0], now - since
            del frame
            if now - started >= max_wait_seconds:
                return now - started, False, None, 0.0
            time.sleep(sample_seconds)

    return wait_quiet


def controller_probe() -> Probe:
    """What the controller has, read once at attach: {"tq_version": its transferqueue's version or None,
    "request_types": the requests its loop can decode (None if unknown), and for each of
    CONTROLLER_FUNCTIONS, None if it fits or why not}. Bounded work, read-only; never raises.

    Each check is a closure made by a function of its own here, so that Ray ships all of them by value:
    they use nothing of this module at the controller, only what they were made with."""
    first = _first_items()
    checks = (
        (INDEX_PAGES, _index_pages_misfit(first, PROBE_PARTITIONS)),
        (KEY_WINDOWS, _key_windows_misfit(first, PROBE_PARTITIONS)),
        (QUIET_WAITS, _quiet_waits_misfit(REQUEST_LOOPS)),
    )
    keys_disagree, tq_facts, answer = (
        _keys_disagree(first, PROBE_PARTITIONS, PROBE_KEYS),
        _tq_facts(),
        _answer(),
    )
    index_pages, key_windows = INDEX_PAGES, KEY_WINDOWS

    def probe(controller: Any) -> dict[str, Any]:
        found = tq_facts()
        for name, misfit in checks:
            found[name] = answer(misfit, controller)
        if found[index_pages] is None and found[key_windows] is None:
            disagree = answer(keys_disagree, controller)
            if disagree is not None:
                found[index_pages] = found[key_windows] = disagree
        return found

    return probe


Misfit = Callable[[Any], "str | None"]
FirstItems = Callable[..., list[Any]]


def _tq_facts() -> Callable[[], dict[str, Any]]:
    def tq_facts() -> dict[str, Any]:
        """The controller's transferqueue version and the request types its loop decodes (None: unknown)."""
        import sys

        version = getattr(sys.modules.get("transfer_queue"), "__version__", None)
        request_types = getattr(sys.modules.get("transfer_queue.utils.zmq_utils"), "ZMQRequestType", None)
        try:
            types = sorted(str(member.value) for member in request_types)  # type: ignore[union-attr]
        except Exception:  # no such enum: unknown
            types = None
        return {"tq_version": version if isinstance(version, str) else None, "request_types": types}

    return tq_facts


def _answer() -> Callable[[Misfit, Any], str | None]:
    def answer(misfit: Misfit, controller: Any) -> str | None:
        """A check's answer; a check that raised says what it raised (it never reaches the caller)."""
        try:
            return misfit(controller)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    return answer


def _first_items() -> FirstItems:
    def first(items: Callable[[], Any], count: int, keep: Callable[[Any], bool] = bool) -> list[Any]:
        """The first `count` items that `keep` of a fresh iterator from `items()`, over a dict the request
        thread may be changing (looked at again when it did)."""
        import time

        for attempt in range(4):
            try:
                found = []
                for item in items():
                    if keep(item):
                        found.append(item)
                        if len(found) == count:
                            break
                return found
            except RuntimeError:  # changed size while we looked
                if attempt == 3:
                    raise
                time.sleep(0.01)
        return []

    return first


def _index_pages_misfit(first: FirstItems, probe_partitions: int) -> Misfit:
    def index_pages_misfit(controller: Any) -> str | None:
        manager = getattr(controller, "index_manager", None)
        if manager is None:
            return "the controller has no index_manager"
        if not isinstance(getattr(manager, "global_index_counter", None), int):
            return "index_manager.global_index_counter is not an int"
        owned = getattr(manager, "partition_to_indexes", None)
        if not isinstance(owned, dict):
            return "index_manager.partition_to_indexes is not a dict"
        for indexes in first(owned.values, probe_partitions, lambda _: True):
            if not isinstance(indexes, set | frozenset):
                return "index_manager.partition_to_indexes does not map partitions to sets"
        return None

    return index_pages_misfit


def _key_windows_misfit(first: FirstItems, probe_partitions: int) -> Misfit:
    def key_windows_misfit(controller: Any) -> str | None:
        partitions = getattr(controller, "partitions", None)
        if not isinstance(partitions, dict):
            return "the controller's partitions are not a dict"
        for status in first(partitions.values, probe_partitions, lambda _: True):
            for name in ("revert_keys_mapping", "keys_mapping"):
                if not isinstance(getattr(status, name, None), dict):
                    return f"a partition's {name} is not a dict"
        return None

    return key_windows_misfit


def _odd_pairs() -> Callable[[Any, str, Any, list[tuple[Any, Any]]], list[tuple[Any, Any]]]:
    def odd(manager: Any, partition: str, status: Any, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """The (index, key) pairs still there on which TQ's two key maps disagree, or whose index is not
        the partition's or not below the counter."""
        owned = manager.partition_to_indexes.get(partition, ())
        end = manager.global_index_counter
        return [
            (index, key)
            for index, key in pairs
            if status.revert_keys_mapping.get(index) == key  # still there
            and (
                not isinstance(key, str)
                or status.keys_mapping.get(key) != index
                or index not in owned
                or not 0 <= index < end
            )
        ]

    return odd


def _keys_disagree(first: FirstItems, probe_partitions: int, probe_keys: int) -> Misfit:
    odd = _odd_pairs()

    def keys_disagree(controller: Any) -> str | None:
        """A key window's answer means a key of the partition at that index: TQ's two key maps agree, and
        the index is the partition's and below the counter (what index pages read). A pair the job's
        requests were changing meanwhile (a put sets one map then the other) is looked at again. Looks at
        the newest partitions that have keys, and their newest keys: a bounded look, where the job's
        current rows are."""
        import time

        manager = controller.index_manager

        def newest(mapping: dict[Any, Any]) -> Callable[[], Any]:
            return lambda: reversed(mapping.items())

        def has_keys(item: tuple[str, Any]) -> bool:
            return bool(item[1].revert_keys_mapping)

        for partition, status in first(newest(controller.partitions), probe_partitions, has_keys):
            sample = first(newest(status.revert_keys_mapping), probe_keys, lambda _: True)
            suspects = odd(manager, partition, status, sample)
            for pause_seconds in (0.01, 0.05, 0.25):  # a clear of many rows is one long request
                if not suspects:
                    break
                time.sleep(pause_seconds)
                suspects = odd(manager, partition, status, suspects)
            if suspects:
                index, key = suspects[0]
                return (
                    f"in {partition!r}, index {index} maps to key {key!r}, which the controller's other "
                    "maps disagree with"
                )
        return None

    return keys_disagree


def _quiet_waits_misfit(loops: Sequence[str]) -> Misfit:
    def quiet_waits_misfit(controller: Any) -> str | None:
        import inspect
        import threading

        thread = getattr(controller, "process_request_thread", None)
        if not isinstance(thread, threading.Thread) or thread.ident is None:
            return "the controller has no request thread"
        for name in loops:
            method = getattr(type(controller), name, None)
            # Ray wraps an actor's methods (tracing): the frame the wait looks for is TQ's own function's.
            code = getattr(inspect.unwrap(method), "__code__", None) if callable(method) else None
            if code is not None and {"request_handle_socket", "recv_multipart"} <= set(code.co_names):
                return None
        return "no request loop of the controller waits in request_handle_socket.recv_multipart"

    return quiet_waits_misfit
