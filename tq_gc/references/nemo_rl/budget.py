"""A bound on how many staging keys one recovery point may name, counted before they are taken.

A pickle's shared references are free: a file of a few kilobytes can hold one group a thousand times,
each with a thousand references to one sibling, whose key list is a thousand references to one string,
and so name a billion keys. Keys are counted by list lengths before any is taken, so such a file fails
after at most MAX_KEY_MENTIONS keys, in memory the size of the file.
"""

from __future__ import annotations

from typing import Any

from tq_gc.references.nemo_rl.errors import InventoryError

# Far above what one recovery point of a real job names (each key is a row of the staging partition,
# and one file is at most max_file_bytes, 64 MiB), far below what would exhaust the sweeper.
MAX_KEY_MENTIONS = 4_000_000


class KeyBudget:
    """Counts the keys one recovery point names, across all its files."""

    def __init__(self, limit: int = MAX_KEY_MENTIONS) -> None:
        self.limit = limit
        self.taken = 0

    def take(self, keys: Any, where: str) -> list[str]:
        """`keys` if it is a list of non-empty strings within the budget, else InventoryError."""
        if not isinstance(keys, list):
            raise InventoryError(f"{where} is {type(keys).__name__}, not a list of keys")
        self.count(len(keys), where)
        if not all(isinstance(key, str) and key for key in keys):
            raise InventoryError(f"{where} must be a list of non-empty key strings")
        return keys

    def count(self, mentions: int, where: str) -> None:
        """Count `mentions` keys about to be read at `where`; InventoryError past the limit."""
        self.taken += mentions
        if self.taken > self.limit:
            raise InventoryError(
                f"names more than {self.limit} staging keys (at {where}): refused, a file of shared "
                "references can name billions; no real recovery point holds this many"
            )
