"""The sizes a listing read, {key: bytes}, held as the one size most rows share plus the rows apart.

A 100k-row listing that put every size into a dict spent ~20 ms building it, and each lookup after (one
per orphan in the report's bytes, one per deleted row in the reclaimed bytes) missed the cache: ~20 ms
more for each at 100k (docs/performance.md). The rows of a partition mostly have one size (fixed-shape
fields): RowSizes keeps that size once, and apart only the rows of another size and those without one.
The bytes of a set of listed rows are then their count times the shared size, corrected by the rows
apart among them. Where every row's size differs (jagged fields), every row is apart: a dict as before.
Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import filterfalse

from tq_gc.rows import ListedKeys


class RowSizes(Mapping[str, int]):
    """{key: bytes} of the rows of `listed` (the listing's own {key: ...}, shared, not copied) whose
    size was read: each is `apart`'s if there, none if in `unsized`, else the shared size. Filled a
    window at a time (add) while the listing fills `listed`; read only once the listing is done."""

    def __init__(self, listed: Mapping[str, object]) -> None:
        self._listed = listed
        self._read = False  # whether a window had sizes: until one has, no row has one (none kept apart)
        self._shared: int | None = None  # None until a window's rows all had one size
        self._apart: dict[str, int] = {}
        self._unsized: set[str] = set()

    def add(self, keys: Sequence[str | None], row_bytes: Sequence[int] | None, relisted: bool) -> None:
        """A window's keys (None: an index without a row) and each one's bytes (-1 unknown; None: no
        sizes read for the window). `relisted`: some of its keys were listed in an earlier window too
        (deleted and put again during the listing): the later window's sizes are theirs. `listed`
        holds the window's keys already."""
        if relisted:
            self._forget(keys)
        if row_bytes is None:
            if self._read:
                self._unsized.update(keys)  # type: ignore[arg-type]
                self._unsized.discard(None)
            return
        if not self._read:  # the rows of earlier windows, read without sizes, are kept apart now
            self._read = True
            self._unsized.update(self._listed)
            self._unsized.difference_update(keys)
        if row_bytes and self._all_shared(row_bytes):
            return
        self._add_apart(keys, row_bytes)

    def _all_shared(self, row_bytes: Sequence[int]) -> bool:
        """Whether the window's rows all have one size, the shared one (the first such sets it): the
        usual window, nothing kept per row."""
        first = row_bytes[0]
        if first >= 0 and self._shared in (None, first) and row_bytes.count(first) == len(row_bytes):
            self._shared = first
            return True
        return False

    def _add_apart(self, keys: Sequence[str | None], row_bytes: Sequence[int]) -> None:
        """Each keyed row apart, by its size or as unsized (at C speed where every size is known; a
        row of the shared size kept apart counts the same)."""
        if -1 not in row_bytes:
            self._apart.update(zip(keys, row_bytes, strict=True))  # type: ignore[arg-type]
            self._apart.pop(None, None)  # type: ignore[call-overload]
            return
        for key, size in zip(keys, row_bytes, strict=True):
            if key is not None:
                if size < 0:
                    self._unsized.add(key)
                else:
                    self._apart[key] = size

    def _forget(self, keys: Sequence[str | None]) -> None:
        for key in keys:
            if key is not None:
                self._apart.pop(key, None)
                self._unsized.discard(key)

    def covers(self, listed: Mapping[str, object]) -> bool:
        """Whether `listed` is the listing these sizes were read in (a swept partition's ListedKeys)."""
        return listed is self._listed or (isinstance(listed, ListedKeys) and listed.indexes is self._listed)

    def listed_bytes(self, keys: Collection[str]) -> tuple[int, int]:
        """(bytes, rows with a size) of `keys`, every one of them a row of the listing (unchecked: the
        caller knows it, as of a plan's buckets and the rows a sweep deleted, see covers)."""
        count = len(keys)
        if not self._read:
            return 0, 0
        shared = self._shared or 0
        if not self._apart and not self._unsized:
            return count * shared, count
        wanted: AbstractSet[str] = keys if isinstance(keys, (set, frozenset)) else set(keys)
        unsized = len(self._unsized & wanted) if self._unsized else 0
        if len(self._apart) < count:
            apart = [size for key, size in self._apart.items() if key in wanted]
        else:
            found = list(map(self._apart.get, wanted))
            apart = [size for size in found if size is not None]
        return (count - unsized - len(apart)) * shared + sum(apart), count - unsized

    def total(self) -> tuple[int, int]:
        """(bytes, rows with a size) of every listed row."""
        if not self._read:
            return 0, 0
        with_shared = len(self._listed) - len(self._apart) - len(self._unsized)
        return with_shared * (self._shared or 0) + sum(self._apart.values()), len(self._listed) - len(
            self._unsized
        )

    def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
        size = self._apart.get(key)
        if size is not None:
            return size
        if self._shared is None or not self._read or key in self._unsized or key not in self._listed:
            return default
        return self._shared

    def __getitem__(self, key: str) -> int:
        size = self.get(key)
        if size is None:
            raise KeyError(key)
        return size

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        if not self._read:
            return iter(())
        return filterfalse(self._unsized.__contains__, self._listed)

    def __len__(self) -> int:
        return len(self._listed) - len(self._unsized) if self._read else 0
