"""A change journal inside the job's TransferQueue controller: which rows its mutating calls touched, so
that a listing re-reads only those (journalled_keys.py). Off by default (TransferQueueRowStore's
`change_journal`).

TQ 0.1.9-0.1.11 keep no change signal: no per-row versions, and freed global indexes are reissued first in,
first out, so `global_index_counter` stands still under churn. Every row mutation is a controller method
that its request thread calls as `self.<name>` (0.1.9's request loop, the request handlers of 0.1.10 and
0.1.11; read in each wheel: MUTATIONS). Installed as attributes of the controller instance, wrappers
stand in that path; each, after the wrapped call returns or raises, appends (seq, partition, the global
indexes touched, or None for the whole partition) under a lock. Appending after the call means that every
entry up to a seq read was complete when it was read: a re-read after that read sees its effect. A call in
flight meanwhile gets a later seq, and the next re-read sees it.

Bounded: a ring of at most `capacity` indexes; the oldest entries dropped make every reader that had not
read past them untrusted (a full listing, which sets its base afresh). `load_checkpoint` (the whole
controller replaced under the same instance) and a call whose arguments could not be read do the same.
An epoch (a random id at install) tells a reader that the journal it read before is not this one. A call
already running when the wrappers went in is not recorded: until no frame of an unwrapped mutating call is
on any thread's stack (looked at by every read), the journal answers untrusted.

What it cannot see: a Ray actor call of one of these methods (`controller.clear_meta.remote(...)`), which
runs the class's function captured when the actor was created, never an instance attribute. TQ's own
client and interface make none (their `.remote` calls are get_config, store_config, start_metrics and
register_storage_units_for_metrics), but another tool could. So the journal serves only listings whose
staleness can delete no row: a swept partition's keys, each of which is re-checked (global index and tags)
before its delete; never a reference source's tags.

Like internals.py's, these functions run inside the controller (`__ray_call__`) and are closures shipped by
value: they use nothing of tq-gc there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The attribute of the controller instance that holds the journal, and the layout of what it holds.
JOURNAL_ATTRIBUTE = "_tqgc_change_journal"
JOURNAL_FORMAT = 1

# The mutating methods wrapped, by TQ version, with the parameters each wrapper reads (0.1.9 has no
# mark_clearing: its clears zero the production status inside clear_meta). Nothing else writes a
# partition's keys, tags, field metadata or index sets: read in 0.1.9, 0.1.10 and 0.1.11's controller.py.
_COMMON = {
    "create_partition": ("partition_id",),
    "get_metadata": ("partition_id", "mode"),
    "kv_retrieve_meta": ("partition_id", "create"),
    "update_production_status": ("partition_id", "global_indexes"),
    "set_custom_meta": ("partition_custom_meta",),
    "clear_meta": ("global_indexes", "partition_ids"),
    "clear_partition": ("partition_id",),
    "load_checkpoint": ("path",),
}
MUTATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.1.9": _COMMON,
    "0.1.10": {**_COMMON, "mark_clearing": ("global_indexes", "partition_ids")},
    "0.1.11": {**_COMMON, "mark_clearing": ("global_indexes", "partition_ids")},
}

# controller -> {"installed": bool, "epoch": str | None, "why": str | None}
Install = Callable[[Any], dict[str, Any]]
# (controller, epoch, since seq, partitions) -> {"installed", "epoch", "seq", "settled", "trusted", "why",
# "touched": {partition: sorted indexes, or None for the whole partition}}
Read = Callable[[Any, "str | None", "int | None", list[str]], dict[str, Any]]
# (controller, epoch) -> whether the originals were put back (the last holder of that epoch left)
Uninstall = Callable[[Any, str], bool]


def journal_installer(capacity_indexes: int) -> Install:
    """Install the journal (or join the one installed: holders counted), if the controller runs a TQ
    whose methods were read (MUTATIONS) and each has the parameters its wrapper reads. Else nothing is
    installed, and the answer says why."""
    attribute, layout = JOURNAL_ATTRIBUTE, JOURNAL_FORMAT
    check, new_state, recorder = _checker(MUTATIONS), _new_state(layout, capacity_indexes), _recorder()
    wrapper, unrecorded = _wrapper(_touched_by()), _unrecorded_calls()

    def install(controller: Any) -> dict[str, Any]:
        state = controller.__dict__.get(attribute)
        if state is not None:
            if state["format"] != layout:
                return {"installed": False, "epoch": None, "why": "another tq-gc's journal is installed"}
            state["holders"] += 1
            return {"installed": True, "epoch": state["epoch"], "why": None}
        signatures, codes, why = check(controller)
        if why is not None:
            return {"installed": False, "epoch": None, "why": why}
        state = new_state()
        state["original_codes"] = codes
        record = recorder(state)
        wrappers = {}
        for name, signature in signatures.items():
            state["originals"][name] = (name in controller.__dict__, controller.__dict__.get(name))
            wrappers[name] = wrapper(name, getattr(controller, name), signature, record)
        state["wrapper_code"] = next(iter(wrappers.values())).__code__
        controller.__dict__[attribute] = state
        for name, journalled in wrappers.items():
            setattr(controller, name, journalled)
        state["settled"] = not unrecorded(state)
        return {"installed": True, "epoch": state["epoch"], "why": None}

    return install


def _checker(mutations: dict[str, dict[str, tuple[str, ...]]]) -> Callable[[Any], tuple[Any, Any, Any]]:
    def check(controller: Any) -> tuple[dict[str, Any], set[Any], str | None]:
        """({method: its signature}, the code of each TQ function wrapped, None), or why not to install."""
        import inspect
        import sys

        version = getattr(sys.modules.get("transfer_queue"), "__version__", None)
        wanted = mutations.get(version) if isinstance(version, str) else None
        if wanted is None:
            return {}, set(), f"TransferQueue {version} was not read"
        signatures, codes = {}, set()
        for name, parameters in wanted.items():
            method = getattr(controller, name, None)
            own = getattr(type(controller), name, None)
            code = getattr(inspect.unwrap(own), "__code__", None) if callable(own) else None
            if method is None or code is None or code.co_name != name:
                return {}, set(), f"the controller's {name} is not TQ's own"
            signatures[name] = inspect.signature(method)
            missing = set(parameters).difference(signatures[name].parameters)
            if missing:
                return {}, set(), f"{name} takes no {sorted(missing)}"
            codes.add(code)
        return signatures, codes, None

    return check


def _new_state(layout: int, capacity_indexes: int) -> Callable[[], dict[str, Any]]:
    def new_state() -> dict[str, Any]:
        import collections
        import threading
        import uuid

        return {
            "format": layout,
            "epoch": uuid.uuid4().hex,
            "lock": threading.Lock(),
            "seq": 0,
            "entries": collections.deque(),  # (seq, partition, indexes or None), oldest first
            "held": 0,  # indexes held (a whole partition's entry counts one)
            "capacity": capacity_indexes,
            "trusted_from": 0,  # a reader must have read this seq or a later one
            "untrusted_why": None,
            "holders": 1,
            "originals": {},  # {name: (whether the instance had its own attribute, that attribute)}
            "settled": False,
        }

    return new_state


def _recorder() -> Callable[[dict[str, Any]], Callable[[Any], None]]:
    def recorder(state: dict[str, Any]) -> Callable[[Any], None]:
        def record(touched: Any) -> None:
            """Append under the lock: {partition: indexes or None}, or None (nobody can trust the past).
            Never raises: it runs in the job's request, which a journal that cannot record must not fail;
            every reader distrusts it instead (full listings, until a checkpoint load starts it afresh)."""
            try:
                append(touched)
            except Exception:
                state["trusted_from"] = float("inf")
                state["untrusted_why"] = "the journal could not record a call"

        def append(touched: Any) -> None:
            with state["lock"]:
                state["seq"] += 1
                seq, entries = state["seq"], state["entries"]
                if touched is None:
                    entries.clear()
                    state["held"], state["trusted_from"] = 0, seq
                    state["untrusted_why"] = "the controller's rows were replaced (load_checkpoint)"
                    return
                for partition, indexes in touched.items():
                    entry = None if indexes is None else tuple(indexes)
                    entries.append((seq, partition, entry))
                    state["held"] += 1 if entry is None else max(1, len(entry))
                while state["held"] > state["capacity"] and entries:
                    dropped_seq, _, dropped = entries.popleft()
                    state["held"] -= 1 if dropped is None else max(1, len(dropped))
                    state["trusted_from"] = max(state["trusted_from"], dropped_seq)
                    state["untrusted_why"] = "the journal overflowed"

        return record

    return recorder


def _wrapper(touched_by: dict[str, Callable[[dict[str, Any], Any], Any]]) -> Callable[..., Any]:
    def wrapper(name: str, method: Any, signature: Any, record: Callable[[Any], None]) -> Any:
        reads = touched_by[name]

        def journalled(*args: Any, **kwargs: Any) -> Any:
            try:
                arguments = signature.bind(*args, **kwargs).arguments
            except TypeError:
                arguments = None
            answer = None
            try:
                answer = method(*args, **kwargs)
                return answer
            finally:
                try:
                    touched = None if arguments is None else reads(arguments, answer)
                except Exception:  # never fail the job's request: distrust the journal instead
                    touched = None
                if touched != {}:
                    record(touched)

        return journalled

    return wrapper


def journal_reader() -> Read:
    """What changed in `partitions` since `since` (a seq this journal, of `epoch`, answered before): the
    touched indexes, when the journal holds every entry after it; else untrusted, with the seq a full
    listing started now may take as its base (`settled`: no unrecorded call can still be running)."""
    attribute, unrecorded = JOURNAL_ATTRIBUTE, _unrecorded_calls()

    def read(controller: Any, epoch: str | None, since: int | None, partitions: list[str]) -> dict[str, Any]:
        state = controller.__dict__.get(attribute)
        if state is None:
            return {
                "installed": False,
                "epoch": None,
                "seq": None,
                "settled": False,
                "trusted": False,
                "why": "no journal in the controller",
                "touched": {},
            }
        with state["lock"]:
            seq = state["seq"]
            if not state["settled"] and not unrecorded(state):
                state["settled"] = True
                state["trusted_from"] = max(state["trusted_from"], seq)
            answer = {
                "installed": True,
                "epoch": state["epoch"],
                "seq": seq,
                "settled": state["settled"],
                "trusted": False,
                "why": None,
                "touched": {},
            }
            if not state["settled"]:
                answer["why"] = "a call from before the journal was installed may still be running"
            elif epoch != state["epoch"]:
                answer["why"] = "no earlier read of this journal"
            elif since is None or since < state["trusted_from"]:
                answer["why"] = state["untrusted_why"] or "no earlier read of this journal"
            else:
                answer["trusted"] = True
                answer["touched"] = _since(state["entries"], since, set(partitions))
            return answer

    def _since(entries: Any, since: int, wanted: set[str]) -> dict[str, Any]:
        touched: dict[str, Any] = {}
        for seq, partition, indexes in reversed(entries):
            if seq <= since:
                break
            if partition not in wanted or (partition in touched and touched[partition] is None):
                continue
            if indexes is None:
                touched[partition] = None
            else:
                touched.setdefault(partition, set()).update(indexes)
        return {partition: None if found is None else sorted(found) for partition, found in touched.items()}

    return read


def journal_uninstaller() -> Uninstall:
    """One holder of the journal of `epoch` leaves; the last one puts the original methods back and
    removes the journal. Another epoch's journal is left alone."""
    attribute = JOURNAL_ATTRIBUTE

    def uninstall(controller: Any, epoch: str) -> bool:
        state = controller.__dict__.get(attribute)
        if state is None or state["epoch"] != epoch:
            return False
        state["holders"] -= 1
        if state["holders"] > 0:
            return False
        for name, (had_own, own) in state["originals"].items():
            if had_own:
                setattr(controller, name, own)
            else:
                controller.__dict__.pop(name, None)
        del controller.__dict__[attribute]
        return True

    return uninstall


def _touched_by() -> dict[str, Callable[[dict[str, Any], Any], Any]]:
    """{method: (its bound arguments, its answer or None if it raised) -> {partition: indexes, or None
    for the whole partition}, {} when it changed no row, or None when no past can be trusted}."""

    def indexes_of(answer: Any) -> Any:
        return None if answer is None else list(answer.global_indexes)

    def partition(arguments: dict[str, Any], answer: Any) -> Any:
        return {arguments["partition_id"]: None}

    def inserted(arguments: dict[str, Any], answer: Any) -> Any:
        if arguments.get("mode", "fetch") != "insert":
            return {}  # fetch modes mark consumption only
        return {arguments["partition_id"]: indexes_of(answer)}

    def created(arguments: dict[str, Any], answer: Any) -> Any:
        if not arguments.get("create", False):
            return {}
        return {arguments["partition_id"]: indexes_of(answer)}

    def produced(arguments: dict[str, Any], answer: Any) -> Any:
        return {arguments["partition_id"]: list(arguments["global_indexes"])}

    def tagged(arguments: dict[str, Any], answer: Any) -> Any:
        return {pid: list(meta) for pid, meta in arguments["partition_custom_meta"].items()}

    def cleared(arguments: dict[str, Any], answer: Any) -> Any:
        touched: dict[str, list[int]] = {}
        for pid, index in zip(arguments["partition_ids"], arguments["global_indexes"], strict=False):
            touched.setdefault(pid, []).append(index)
        return touched

    def replaced(arguments: dict[str, Any], answer: Any) -> Any:
        return None

    return {
        "create_partition": partition,
        "get_metadata": inserted,
        "kv_retrieve_meta": created,
        "update_production_status": produced,
        "set_custom_meta": tagged,
        "mark_clearing": cleared,
        "clear_meta": cleared,
        "clear_partition": partition,
        "load_checkpoint": replaced,
    }


def _unrecorded_calls() -> Callable[[dict[str, Any]], bool]:
    def unrecorded(state: dict[str, Any]) -> bool:
        """Whether some thread is inside a wrapped method's original code with no wrapper below it: a
        call that began before the wrappers went in, which the journal will not record."""
        import sys

        originals, wrapper = state["original_codes"], state.get("wrapper_code")
        for frame in sys._current_frames().values():
            current: Any = frame
            while current is not None:
                if current.f_code in originals:
                    caller = current.f_back
                    while caller is not None and caller.f_code is not wrapper:
                        caller = caller.f_back
                    if caller is None:
                        return True
                current = current.f_back
        return False

    return unrecorded
