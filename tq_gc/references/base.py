"""A reference source names rows that must not be deleted.

Each source returns a complete snapshot or raises ReferenceSourceError: there is no partial answer,
because a partial "still referenced" set is how collectors delete live data (iceberg#4194).
"""

from __future__ import annotations

from typing import Protocol

from tq_gc.model import KeysByPartition


class ReferenceSource(Protocol):
    name: str

    def read(self) -> KeysByPartition:
        """Every row this source references now, as {partition: keys}.

        Raises ReferenceSourceError if it cannot be read in full."""
        ...
