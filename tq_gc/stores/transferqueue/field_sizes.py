"""Each row's bytes, read inside the TransferQueue controller from its partitions' field metadata (a TQ
internal: listed in internals.py, whose key windows call this in the same call as the keys)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# (a partition's status in the controller, global indexes) -> the bytes of each index's row, -1 where no
# field of it has a size the controller recorded
RowBytesReader = Callable[[Any, Sequence[int]], list[int]]


def row_bytes_reader() -> RowBytesReader:
    """Each row's bytes from its partition's field metadata, the same in 0.1.9, 0.1.10 and 0.1.11:
    `status.field_metadata` ({field: FieldMeta}: `global_indexes` the rows that have the field, `dtype` a
    torch dtype, `shape` one sample's, or `per_sample_shapes[global_index]` for a nested field) and
    `status.field_custom_backend_meta` ({global_index: {field: meta}}, where Mooncake records
    `{"packed_size": n}` for each non-tensor value). A non-tensor value on SimpleStorage has no recorded
    size and counts nothing. Read-only; a field's per-row size is worked out once a call. Every helper
    is nested (or a closure's): the reader is shipped to the controller by value, which cannot import
    tq_gc."""
    shape_bytes = _shape_bytes()

    def field_bytes(meta: Any) -> tuple[set[int], int | None, Any, int]:
        """(its rows, the bytes of one row where all have one shape, its per-row shapes, its itemsize)."""
        itemsize = int(getattr(meta.dtype, "itemsize", 0) or 0) if not meta.is_non_tensor else 0
        fixed = None if meta.is_nested else shape_bytes(meta.shape, itemsize)
        return meta.global_indexes, fixed, meta.per_sample_shapes, itemsize

    def covers(rows: Any, indexes: Sequence[int]) -> bool:
        """Whether every index has the field: a look-up per index, no set of the window built."""
        return (rows if isinstance(rows, (set, frozenset)) else set(rows)).issuperset(indexes)

    def packed_sizes(backend: Any, name: str, rows: set[int]) -> dict[int, int]:
        """The sizes a backend recorded for this field of these rows (Mooncake's `packed_size`)."""
        packed = {}
        for index in rows:
            recorded = backend[index].get(name)
            if isinstance(recorded, dict) and isinstance(recorded.get("packed_size"), int):
                packed[index] = recorded["packed_size"]
        return packed

    def read_bytes(status: Any, indexes: Sequence[int]) -> list[int]:
        # Set operations in C, not a loop per row and field: inside the job's controller, at 1M rows.
        # The window's own set only where a field does not cover it or a backend recorded sizes: built
        # for every window, it was most of what sizes added to the key windows (~0.5 ms of 4,096).
        backend = status.field_custom_backend_meta
        wanted = set(indexes) if backend else None
        with_backend_meta = wanted.intersection(backend.keys()) if wanted is not None else set()
        common, everyone_sized = 0, False  # the bytes of fields every wanted row has at one size
        extra: dict[int, int] = {}  # {index: bytes} of every row sized apart (the others: common)
        for name, meta in list(status.field_metadata.items()):
            rows, fixed, shapes, itemsize = field_bytes(meta)
            packed = packed_sizes(backend, name, with_backend_meta.intersection(rows))
            if not itemsize and not packed:
                continue  # no tensor dtype, no recorded size: it counts nothing in any row
            if fixed is not None and not packed and covers(rows, indexes):
                common, everyone_sized = common + fixed, True  # the usual field: no set built
                continue
            wanted = set(indexes) if wanted is None else wanted
            for index, recorded in packed.items():
                extra[index] = extra.get(index, 0) + recorded
            for index in wanted.intersection(rows).difference(packed):
                row_bytes = fixed if fixed is not None else shape_bytes(shapes.get(index), itemsize)
                if row_bytes is not None:
                    extra[index] = extra.get(index, 0) + row_bytes
        rest = common if everyone_sized else -1  # the bytes of a row not in extra
        if not extra:
            return [rest] * len(indexes)  # the usual window: no loop per row
        return [common + extra[i] if i in extra else rest for i in indexes]

    return read_bytes


def _shape_bytes() -> Callable[[Any, int], int | None]:
    """shape_bytes(shape, itemsize): a row's bytes from its recorded shape; None without a shape or a
    tensor dtype. Made by a function so that it too is shipped by value."""

    def shape_bytes(shape: Any, itemsize: int) -> int | None:
        if shape is None or not itemsize:
            return None
        count = 1
        for dim in shape:
            count *= int(dim)
        return count * itemsize

    return shape_bytes
