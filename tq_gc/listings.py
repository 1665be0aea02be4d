"""How a sweep's row store listed a partition: by its change journal (the listing kept from the last
sweep, only the global indexes changed since re-read) or in full, and why in full. The row store says it
(RowStore.take_listings), the report carries it (`listings`), the metrics count it. Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ListedBy(StrEnum):
    JOURNAL = "journal"  # the kept listing, with the indexes the change journal says were touched re-read
    FULL = "full"  # every row of the partition read


@dataclass(frozen=True, slots=True)
class HowListed:
    """`by` the journal, with `indexes_reread`; or in full, with `why` (the journal off, untrusted, the
    first listing, the periodic full listing, ...)."""

    by: ListedBy
    why: str | None = None
    indexes_reread: int | None = None

    def __post_init__(self) -> None:
        if self.by is ListedBy.FULL and not self.why:
            raise ValueError("a full listing says why")
        if self.by is ListedBy.JOURNAL and (self.indexes_reread is None or self.indexes_reread < 0):
            raise ValueError(f"a journalled listing counts its indexes_reread, got {self.indexes_reread}")

    @classmethod
    def by_journal(cls, indexes_reread: int) -> HowListed:
        return cls(ListedBy.JOURNAL, None, indexes_reread)

    @classmethod
    def in_full(cls, why: str) -> HowListed:
        return cls(ListedBy.FULL, why, None)

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by.value, "why": self.why, "indexes_reread": self.indexes_reread}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HowListed:
        reread = data.get("indexes_reread")
        return cls(ListedBy(data["by"]), data.get("why"), None if reread is None else int(reread))

    def __str__(self) -> str:
        if self.by is ListedBy.JOURNAL:
            return f"by the change journal ({self.indexes_reread} indexes re-read)"
        return f"in full ({self.why})"


__all__ = ["HowListed", "ListedBy"]
