"""What rows cost on a real TransferQueue: the bytes the listing reads from the controller's field
metadata, against the tensors' own `nbytes`, and the storage units' fill (GET_METRICS)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tq_gc.config import TransferQueueConfig
from tq_gc.stores.transferqueue import TransferQueueRowStore

pytestmark = pytest.mark.ray

TOLERANCE = 0.05


@pytest.fixture
def store(ray_cluster: Any, tq: Any) -> Iterator[TransferQueueRowStore]:
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as attached:
        yield attached


def put_batch(tq: Any, partition: str, keys: list[str], fields: dict[str, Any]) -> dict[str, int]:
    """Put `fields` (name -> batched value) under `keys`; each key's tensor bytes, from torch itself."""
    from tensordict import TensorDict

    tq.kv_batch_put(keys=keys, partition_id=partition, fields=TensorDict(fields, batch_size=len(keys)))
    nbytes = dict.fromkeys(keys, 0)
    for value in fields.values():
        if getattr(value, "is_nested", False):
            rows = list(value.unbind())
        elif hasattr(value, "nbytes"):
            rows = list(value)
        else:
            continue  # a non-tensor value: no tensor bytes
        for key, row in zip(keys, rows, strict=True):
            nbytes[key] += int(row.nbytes)
    return nbytes


def test_listed_bytes_are_the_rows_tensor_nbytes_for_dtypes_shapes_nested_and_non_tensor_fields(
    store: TransferQueueRowStore, tq: Any, tq_partition: str
) -> None:
    import torch
    from tensordict import NonTensorStack

    truth: dict[str, int] = {}
    keys = [f"a{i}" for i in range(6)]
    truth |= put_batch(
        tq,
        tq_partition,
        keys,
        {
            "x": torch.zeros(6, 4, 8, dtype=torch.float32),
            "ids": torch.ones(6, 33, dtype=torch.int64),
            "h": torch.zeros(6, 16, dtype=torch.bfloat16),
            "note": NonTensorStack(*[f"prompt {i}" * 5 for i in range(6)]),
        },
    )
    lengths = [3, 17, 5, 40, 1]
    keys = [f"n{i}" for i in range(5)]
    nested = torch.nested.as_nested_tensor(
        [torch.zeros(n, 7, dtype=torch.float16) for n in lengths], layout=torch.jagged
    )
    truth |= put_batch(tq, tq_partition, keys, {"resp": nested, "m": torch.zeros(5, 2, dtype=torch.uint8)})
    keys = [f"b{i}" for i in range(4)]
    truth |= put_batch(tq, tq_partition, keys, {"x": torch.zeros(4, 4, 8, dtype=torch.float32)})
    tq.kv_clear(["a1", "b2"], tq_partition)
    truth.pop("a1"), truth.pop("b2")

    listed = store.list_keys(tq_partition)
    sizes = store.row_sizes(tq_partition)

    assert set(listed) == set(truth)
    assert set(sizes) == set(truth)
    for group in (["a0", "a2", "a5"], ["n0", "n3", "n4"], ["b0", "b3"], list(truth)):
        reported, real = sum(sizes[k] for k in group), sum(truth[k] for k in group)
        assert abs(reported - real) <= TOLERANCE * real, (group, reported, real)
    store.list_rows(tq_partition)  # a tags source's partition: listed with its tags, sized alike
    assert store.row_sizes(tq_partition) == sizes


def test_the_storage_units_fill_counts_the_rows_put_into_them(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    before = store.storage_fill()

    put_rows(tq_partition, [f"k{i}" for i in range(25)])
    after = store.storage_fill()

    assert before.unread is None and after.unread is None
    assert len(after.units) == 2  # the session's TQ has two storage units
    assert all(unit.capacity is None for unit in after.units)  # total_storage_size: null
    assert after.headroom is None
    assert after.active_keys - before.active_keys == 25
