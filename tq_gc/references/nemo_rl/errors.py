"""What reading a NeMo RL recovery point can end in, besides its rows.

InventoryError   a file is not one NeMo RL's restore would accept, or one it advertises is missing:
                 the source fails (the sweep aborts, fail closed)
SaveInProgress   the recovery point is still being written (a ledger without its metadata): the
                 sweep skips
"""

from __future__ import annotations


class InventoryError(ValueError):
    """A recovery point's file is not one this reader knows: the message says what, and the fix."""


class SaveInProgress(Exception):
    """The recovery point's files are not all written yet; its rows cannot be known."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
