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
    size and counts nothing. Read-only; a field's per-row size is worked out once a call."""

    def field_bytes(meta: Any) -> tuple[set[int], int | None, Any, int]:
        """(its rows, the bytes of one row where all have one shape, its per-row shapes, its itemsize)."""
        itemsize = int(getattr(meta.dtype, "itemsize", 0) or 0) if not meta.is_non_tensor else 0
        fixed = None
        if itemsize and meta.shape is not None and not meta.is_nested:
            count = 1
            for dim in meta.shape:
                count *= int(dim)
            fixed = count * itemsize
        return meta.global_indexes, fixed, meta.per_sample_shapes, itemsize

    def read_bytes(status: Any, indexes: Sequence[int]) -> list[int]:
        fields = [(name, *field_bytes(meta)) for name, meta in list(status.field_metadata.items())]
        backend = status.field_custom_backend_meta
        sizes = []
        for index in indexes:
            total, sized = 0, False
            packed = backend.get(index)
            for name, rows, fixed, shapes, itemsize in fields:
                if index not in rows:
                    continue
                if packed is not None:
                    recorded = packed.get(name)
                    if isinstance(recorded, dict) and isinstance(recorded.get("packed_size"), int):
                        total, sized = total + recorded["packed_size"], True
                        continue
                if fixed is not None:
                    total, sized = total + fixed, True
                elif itemsize:
                    shape = shapes.get(index)
                    if shape is not None:
                        count = 1
                        for dim in shape:
                            count *= int(dim)
                        total, sized = total + count * itemsize, True
            sizes.append(total if sized else -1)
        return sizes

    return read_bytes
