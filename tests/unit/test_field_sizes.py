"""The controller-side size reader (stores/transferqueue/field_sizes.py) against the plain reading of TQ's
field metadata, row by row and field by field, on random partitions: fixed-shape, nested and non-tensor
fields, rows that lack some fields, and a backend's recorded packed sizes. The statuses are plain
stand-ins for the controller's (the reader's pure input); tests/integration/test_tq_footprint.py reads a
real TQ."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import given
from hypothesis import strategies as st

from tq_gc.stores.transferqueue.field_sizes import row_bytes_reader

DTYPES = (torch.float32, torch.int64, torch.bfloat16, torch.uint8)


@dataclass
class Meta:
    global_indexes: set[int]
    dtype: Any
    shape: tuple[int, ...] | None
    is_nested: bool
    is_non_tensor: bool
    per_sample_shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class Status:
    field_metadata: dict[str, Meta]
    field_custom_backend_meta: dict[int, dict[str, Any]]


def per_row(status: Status, indexes: Sequence[int]) -> list[int]:
    """The plain reading: each row, each field it has, its recorded packed size, else its dtype times
    its shape (one shape for the field, or the row's own for a nested field); -1 where none has a size."""
    sizes = []
    for index in indexes:
        total, sized = 0, False
        for name, meta in status.field_metadata.items():
            if index not in meta.global_indexes:
                continue
            recorded = status.field_custom_backend_meta.get(index, {}).get(name)
            if isinstance(recorded, dict) and isinstance(recorded.get("packed_size"), int):
                total, sized = total + recorded["packed_size"], True
                continue
            if meta.is_non_tensor:
                continue
            shape = meta.per_sample_shapes.get(index) if meta.is_nested else meta.shape
            if shape is not None:
                total, sized = total + int(torch.Size(shape).numel()) * meta.dtype.itemsize, True
        sizes.append(total if sized else -1)
    return sizes


ROWS = st.lists(st.integers(0, 30), max_size=40)
SHAPE = st.lists(st.integers(0, 5), max_size=3).map(tuple)


@st.composite
def statuses(draw: st.DrawFn) -> Status:
    metas = {}
    for number in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["fixed", "nested", "non_tensor"]))
        rows = set(draw(ROWS))
        shapes = {row: draw(SHAPE) for row in rows if draw(st.booleans())} if kind == "nested" else {}
        metas[f"f{number}"] = Meta(
            global_indexes=rows,
            dtype=draw(st.sampled_from(DTYPES)),
            shape=draw(SHAPE) if kind == "fixed" else None,
            is_nested=kind == "nested",
            is_non_tensor=kind == "non_tensor",
            per_sample_shapes=shapes,
        )
    backend: dict[int, dict[str, Any]] = {}
    for row in draw(ROWS):
        name = draw(st.sampled_from([*metas, "other"]))
        backend.setdefault(row, {})[name] = draw(
            st.sampled_from([{"packed_size": draw(st.integers(0, 999))}, {"packed_size": "?"}, None])
        )
    return Status(metas, backend)


@given(statuses(), ROWS)
def test_the_reader_gives_each_row_the_bytes_its_fields_metadata_records(
    status: Status, indexes: list[int]
) -> None:
    assert row_bytes_reader()(status, indexes) == per_row(status, indexes)


def test_rows_that_all_hold_the_same_fields_read_dtype_times_shape() -> None:
    rows = set(range(1000))
    status = Status(
        {
            "tokens": Meta(rows, torch.int64, (512,), False, False),
            "mask": Meta(rows, torch.uint8, (512,), False, False),
            "reward": Meta(set(range(500)), torch.float32, (), False, False),
        },
        {},
    )
    sizes = row_bytes_reader()(status, [0, 999, 5000])
    assert sizes == [512 * 8 + 512 + 4, 512 * 8 + 512, -1]
