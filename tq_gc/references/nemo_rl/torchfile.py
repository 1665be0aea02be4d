"""A `torch.save` file read without running its code: the zip's `data.pkl` through an allow-list unpickler.

A checkpoint directory is not trusted code, and NeMo RL's own restore loads its files with
`weights_only=False`, so they may hold Python objects (a schema-2 ledger's `canonical_meta` is a
`KVBatchMeta` dataclass). Here no class of the file is ever imported or called: `find_class` maps each of an
exact list of global names to a stand-in of its own, and every other global to an Inert record class
(whatever REDUCE or BUILD hands it is stored, nothing is called), and tensor storages stay references
into the zip that are never read (the rows' keys are strings; tensors only ride along).

torch.save writes pickle protocol 2, in which `bytes` are `_codecs.encode(text, "latin1")` and `b""` is
`bytes()`: both are allowed, as pure functions of their arguments. Memory stays proportional to the file:
a pickle has no operation that multiplies data, its shared references are not copied, and `data.pkl` is
read only up to the size of the file holding it (torch stores entries uncompressed).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tq_gc.references.nemo_rl.errors import InventoryError

KV_BATCH_META = ("nemo_rl.data_plane.interfaces", "KVBatchMeta")
_STORAGE_TYPES = frozenset(
    f"{name}Storage"
    for name in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
)


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """A tensor named by the file, its data left unread: the storage's key in the zip and its shape."""

    storage_key: str
    size: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _StorageRecord:
    key: str


class KVBatchMetaRecord:
    """NeMo RL's `KVBatchMeta` as the file holds it: its field values, nothing run. `fields` is the dict
    the pickle's BUILD step gives (protocol 2 pickles a dataclass as NEWOBJ then BUILD with `__dict__`)."""

    fields: dict[str, Any]

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict) or not all(isinstance(name, str) for name in state):
            raise InventoryError("holds a KVBatchMeta whose state is not a dict of fields")
        self.fields = state

    def get(self, name: str) -> Any:
        return getattr(self, "fields", {}).get(name)


def _latin1_encode(text: Any, encoding: Any = None) -> bytes:
    if not isinstance(text, str) or encoding != "latin1":
        raise InventoryError("holds a _codecs.encode call that is not protocol 2's bytes encoding")
    return text.encode("latin1")


def _empty_bytes(*args: Any) -> bytes:
    if args:
        raise InventoryError("holds a bytes(...) call with arguments")
    return b""


def _rebuild_tensor(storage: Any, offset: Any, size: Any, *rest: Any) -> TensorRecord:
    if not isinstance(storage, _StorageRecord) or not isinstance(size, tuple):
        raise InventoryError("holds a tensor whose storage or size is malformed")
    return TensorRecord(storage.key, tuple(int(dimension) for dimension in size))


_ALLOWED: dict[tuple[str, str], Any] = {
    KV_BATCH_META: KVBatchMetaRecord,
    ("_codecs", "encode"): _latin1_encode,
    ("builtins", "bytes"): _empty_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("collections", "OrderedDict"): OrderedDict,  # a tensor's backward hooks (always empty when saved)
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    **{("torch", name): name for name in _STORAGE_TYPES},  # a storage's dtype, by name only
}
ALLOWED_GLOBALS = frozenset(f"{module}.{name}" for module, name in _ALLOWED)


class Inert:
    """What an object of a class this reader does not know becomes: a record of its global name and of
    what the pickle gave it, never called. The readers accept only their own types where keys are read,
    so one there fails closed, naming the class; anywhere else (a field naming no rows, such as the replay
    index's `extra_info["rollout_metrics"]`, where NeMo keeps wandb Histograms) it is none of theirs."""

    global_name = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # REDUCE, NEWOBJ_EX: arguments kept, unused
        self.arguments = (args, kwargs)

    def __setstate__(self, state: Any) -> None:  # BUILD: the state kept, unused
        self.state = state

    # A dict or list subclass (defaultdict, Counter) gets its items after it is made (SETITEMS, APPENDS)
    def __setitem__(self, key: Any, value: Any) -> None:
        self.__dict__.setdefault("items", []).append((key, value))

    def append(self, value: Any) -> None:
        self.__dict__.setdefault("items", []).append(value)

    def extend(self, values: Any) -> None:
        self.__dict__.setdefault("items", []).extend(values)

    def __repr__(self) -> str:
        return f"<inert {self.global_name}>"


class _Unpickler(pickle.Unpickler):
    def __init__(self, stream: io.BytesIO) -> None:
        super().__init__(stream)
        self._inert: dict[tuple[str, str], type[Inert]] = {}

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        return self._inert_class(module, name)

    def _inert_class(self, module: str, name: str) -> type[Inert]:
        """One stand-in class per unknown global: its name (for errors), none of its code."""
        known = self._inert.get((module, name))
        if known is None:
            global_name = f"{module}.{name}"
            known = type(global_name, (Inert,), {"global_name": global_name, "__slots__": ()})
            self._inert[(module, name)] = known
        return known

    def persistent_load(self, pid: Any) -> Any:
        if (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and pid[1] in _STORAGE_TYPES
            and isinstance(pid[2], str)
        ):
            return _StorageRecord(pid[2])
        raise InventoryError("holds a persistent reference that is not a torch tensor storage")


def load(content: bytes) -> Any:
    """The object a torch.save file (its bytes) holds, built from inert records. Raises InventoryError."""
    pickled = _data_pickle(content)
    try:
        return _Unpickler(io.BytesIO(pickled)).load()
    except InventoryError:
        raise
    except RecursionError:
        raise InventoryError("is nested too deeply to read") from None
    except Exception as exc:  # a broken pickle raises whatever its bad opcode meets (EOF, KeyError, ...)
        raise InventoryError(f"is not a readable torch file (its pickle is broken: {exc!r})") from None


def _data_pickle(content: bytes) -> bytes:
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise InventoryError(
            f"is not a torch.save zip archive (truncated, or another format: {exc})"
        ) from None
    with archive:
        entries = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
        if len(entries) != 1:
            raise InventoryError(
                f"is a zip archive with {len(entries)} data.pkl entries, not a torch.save file"
            )
        [entry] = entries
        if entry.file_size > len(content):
            raise InventoryError(
                f"holds a data.pkl of {entry.file_size} bytes in a file of {len(content)}: refused, it "
                "would expand"
            )
        return _read_entry(lambda: archive.open(entry), len(content))


def _read_entry(open_entry: Callable[[], Any], limit: int) -> bytes:
    try:
        with open_entry() as stream:
            data: bytes = stream.read(limit + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise InventoryError(f"is not a readable torch file (its data.pkl cannot be read: {exc})") from None
    if len(data) > limit:
        raise InventoryError("holds a data.pkl that expands past the file's own size: refused")
    return data
