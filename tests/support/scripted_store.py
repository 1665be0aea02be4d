"""A memory row store that records calls and lets a test slip a write in between sweep steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tq_gc.model import Identity, Tags
from tq_gc.stores.memory import MemoryRowStore


@dataclass
class Hook:
    method: str
    action: Callable[[], None]
    after_calls: int = 0
    fired: bool = False


@dataclass
class ScriptedRowStore(MemoryRowStore):
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)

    def __post_init__(self) -> None:
        MemoryRowStore.__init__(self)

    def before(self, method: str, action: Callable[[], None], after_calls: int = 0) -> None:
        """Run `action` once, right before the (after_calls+1)-th call of `method` from now on."""
        self.hooks.append(Hook(method, action, after_calls + self.count(method)))

    def count(self, method: str) -> int:
        return sum(1 for name, _, _ in self.calls if name == method)

    def _enter(self, method: str, partition: str, n: int) -> None:
        for hook in self.hooks:
            if hook.method == method and not hook.fired and self.count(method) == hook.after_calls:
                hook.fired = True
                hook.action()
        self.calls.append((method, partition, n))

    def list_rows(self, partition: str) -> dict[str, Tags]:
        self._enter("list_rows", partition, 0)
        return super().list_rows(partition)

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        self._enter("identities", partition, len(keys))
        return super().identities(partition, keys)

    def delete(self, partition: str, keys: Sequence[str]) -> None:
        self._enter("delete", partition, len(keys))
        super().delete(partition, keys)
