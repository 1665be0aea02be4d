"""The sizes a listing read, held as a shared size plus the rows apart (row_sizes.py): every sum it gives
equals the plain per-row sum over {key: bytes} as the listing read them, window after window."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tq_gc.decisions import PLANNED, Decision
from tq_gc.footprint import bytes_of, bytes_of_keys
from tq_gc.row_sizes import RowSizes
from tq_gc.rows import ListedKeys

_KEYS = [f"k{i}" for i in range(30)]
_SIZES = st.sampled_from([-1, 0, 7, 64, 64, 64, 10**9])

Window = tuple[list[str | None], list[int] | None]


@st.composite
def _windows(draw: st.DrawFn) -> list[Window]:
    """A listing's windows: each index's key (None: no row there; a key again in a later window: put
    again during the listing) and its bytes (-1 unknown), all one size or not, or no sizes at all."""
    windows: list[Window] = []
    for _ in range(draw(st.integers(0, 6))):
        keys = draw(st.lists(st.sampled_from(_KEYS), unique=True, max_size=8))
        slots: list[str | None] = [*keys, *[None] * draw(st.integers(0, 2))]
        slots = draw(st.permutations(slots))
        kind = draw(st.sampled_from(["one size", "sizes", "none"]))
        if kind == "none":
            windows.append((slots, None))
        elif kind == "one size":
            windows.append((slots, [draw(_SIZES)] * len(slots)))
        else:
            windows.append((slots, [draw(_SIZES) for _ in slots]))
    return windows


def _listed(windows: list[Window]) -> tuple[dict[str, int], RowSizes, dict[str, int]]:
    """The listing's {key: index}, the RowSizes filled as listing.py fills it, and the plain model:
    {key: bytes} where the key's last window gave a size."""
    keys: dict[str, int] = {}
    sizes = RowSizes(keys)
    model: dict[str, int] = {}
    for number, (slots, row_bytes) in enumerate(windows):
        owners = {number * 100 + i: key for i, key in enumerate(slots) if key is not None}
        before = len(keys)
        keys.update((key, index) for index, key in owners.items())
        sizes.add(slots, row_bytes, relisted=len(keys) - before < len(owners))
        for i, key in enumerate(slots):
            if key is not None:
                size = -1 if row_bytes is None else row_bytes[i]
                if size >= 0:
                    model[key] = size
                else:
                    model.pop(key, None)
    return keys, sizes, model


@given(_windows())
def test_the_sizes_read_window_by_window_are_the_last_size_each_key_was_read_with(
    windows: list[Window],
) -> None:
    _, sizes, model = _listed(windows)

    assert dict(sizes) == model and len(sizes) == len(model)
    assert all(sizes.get(key) == model.get(key) for key in [*_KEYS, "never-listed"])
    assert sizes.total() == (sum(model.values()), len(model))


@given(_windows(), st.data())
def test_the_bytes_of_listed_rows_equal_the_sum_of_a_lookup_per_row(
    windows: list[Window], data: st.DataObject
) -> None:
    keys, sizes, model = _listed(windows)
    some = data.draw(st.sets(st.sampled_from(sorted(keys)))) if keys else set()
    as_list = sorted(some)

    expected = (sum(model.get(key, 0) for key in some), sum(key in model for key in some))
    assert sizes.listed_bytes(some) == expected
    assert sizes.listed_bytes(frozenset(some)) == sizes.listed_bytes(as_list) == expected
    assert bytes_of_keys(sizes, as_list, ListedKeys(keys)) == expected[0]
    assert bytes_of_keys(sizes, as_list) == bytes_of_keys(model, as_list) == expected[0]


@given(_windows(), st.data())
def test_a_plans_bytes_by_the_listings_sizes_equal_a_lookup_of_every_row(
    windows: list[Window], data: st.DataObject
) -> None:
    """Over the listing the plan was made from (every listed row in scope, or some out of it)."""
    keys, sizes, model = _listed(windows)
    in_scope = sorted(keys) if data.draw(st.booleans()) else [k for k in keys if data.draw(st.booleans())]
    buckets: dict[Decision, dict[str, set[str]]] = {}
    for key in in_scope:
        buckets.setdefault(data.draw(st.sampled_from(PLANNED)), {}).setdefault("p", set()).add(key)
    listing: Any = {"p": ListedKeys(keys) if data.draw(st.booleans()) else keys}

    assert bytes_of(buckets, {"p": sizes}, listing) == bytes_of(buckets, {"p": model})
