"""Stores that record calls and let a test slip a write in between two steps of a sweep."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tq_gc.model import Identity, Tags
from tq_gc.state.base import Lease, Recheck
from tq_gc.state.memory import MemoryState
from tq_gc.stores.memory import MemoryRowStore


@dataclass
class Hook:
    method: str
    action: Callable[[], None]
    at_call: int
    fired: bool = False


class Script:
    """Call recording and hooks; mixed into a store whose methods call `self._enter(...)`."""

    def _init_script(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.hooks: list[Hook] = []

    def before(self, method: str, action: Callable[[], None], after_calls: int = 0) -> None:
        """Run `action` once, right before the (after_calls+1)-th call of `method` from now on."""
        self.hooks.append(Hook(method, action, after_calls + self.count(method)))

    def count(self, method: str) -> int:
        return sum(1 for name, _, _ in self.calls if name == method)

    def _enter(self, method: str, partition: str = "", n: int = 0) -> None:
        for hook in self.hooks:
            if hook.method == method and not hook.fired and self.count(method) == hook.at_call:
                hook.fired = True
                hook.action()
        self.calls.append((method, partition, n))


class ScriptedRowStore(Script, MemoryRowStore):
    def __init__(self) -> None:
        MemoryRowStore.__init__(self)
        self._init_script()

    def list_rows(self, partition: str) -> dict[str, Tags]:
        self._enter("list_rows", partition)
        return super().list_rows(partition)

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        self._enter("identities", partition, len(keys))
        return super().identities(partition, keys)

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        self._enter("delete", partition, len(expected))
        return super().delete_if_unchanged(partition, expected)


class ScriptedState(Script, MemoryState):
    """A memory state with a hook on the re-check (lease, fences, admissions) that opens each batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        MemoryState.__init__(self, *args, **kwargs)
        self._init_script()

    def recheck(self, lease: Lease, ttl_ms: int) -> Recheck:
        self._enter("recheck")
        return super().recheck(lease, ttl_ms)
