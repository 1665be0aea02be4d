"""The Redis state store's copy of the admission barrier, and the decoding of an admission's document."""

from __future__ import annotations

import json

from tq_gc.state.base import AdmissionRows


class BarrierCopy:
    """This store's copy of the admission barrier of one lease: the documents read so far, decoded."""

    def __init__(self, token: str = "") -> None:
        self.token = token
        self.read = 0  # documents taken so far: where the next read starts
        self.keys: dict[str, set[str]] = {}

    def for_lease(self, token: str) -> BarrierCopy:
        """This copy, or a new empty one for another lease (a lease taken starts its barrier afresh)."""
        if token != self.token:
            self.token, self.read, self.keys = token, 0, {}
        return self

    def take(self, documents: list[str]) -> None:
        for document in documents:
            for partition, keys in decoded_rows(document).items():
                self.keys.setdefault(partition, set()).update(keys)
        self.read += len(documents)


def decoded_rows(document: str) -> AdmissionRows:
    """An admission's rows from the JSON document the registry holds."""
    rows: AdmissionRows = json.loads(document)
    return rows
