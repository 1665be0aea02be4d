"""The sidecar's row store attaches at its first sweep: the job may create its TransferQueue later."""

from __future__ import annotations

import pytest

from tq_gc.errors import StoreUnavailable, TransferQueueNotFound
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.memory import MemoryRowStore


def test_deferred_store_attaches_once_the_queue_exists() -> None:
    attempts: list[int] = []
    real = MemoryRowStore()
    real.put("p", "k")

    def attach() -> MemoryRowStore:
        attempts.append(1)
        if len(attempts) == 1:
            raise TransferQueueNotFound("auto")
        return real

    store = DeferredRowStore(attach)
    with pytest.raises(StoreUnavailable, match="has the job created its TransferQueue yet"):
        store.list_rows("p")
    assert store.list_rows("p") == {"k": {}}
    assert store.list_rows("p") == {"k": {}}
    assert len(attempts) == 2, "attached once it could, then kept"


def test_a_missing_queue_can_be_the_callers_mistake() -> None:
    def attach() -> MemoryRowStore:
        raise TransferQueueNotFound("auto")

    with pytest.raises(TransferQueueNotFound):
        DeferredRowStore(attach, missing_queue_is_transient=False).partitions()


def test_nothing_attached_nothing_closed() -> None:
    attempts: list[int] = []
    store = DeferredRowStore(lambda: attempts.append(1) or MemoryRowStore())  # type: ignore[func-returns-value]
    store.close()
    assert attempts == []


class Controller(MemoryRowStore):
    """A memory store standing for one TQ controller instance: `name` is its identity space, and once
    `gone` its ensure_attached says so, as TransferQueueRowStore's does for a dead or replaced one."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.gone = False
        self.closed = False

    def ensure_attached(self) -> None:
        if self.gone:
            raise StoreUnavailable(f"controller {self.name} is gone")

    def identity_space(self) -> str | None:
        return self.name

    def close(self) -> None:
        self.closed = True


def test_a_store_gone_or_replaced_is_closed_and_the_next_one_attached() -> None:
    controllers = iter([Controller("first"), Controller("second")])
    attached: list[Controller] = []

    def attach() -> Controller:
        attached.append(next(controllers))
        return attached[-1]

    store = DeferredRowStore(attach)
    store.ensure_attached()
    store.ensure_attached()
    assert store.identity_space() == "first" and len(attached) == 1, "kept while it lives"

    attached[0].gone = True
    store.ensure_attached()
    assert attached[0].closed, "our store of the old one closed"
    assert store.identity_space() == "second"
    assert not attached[1].closed


def test_while_no_store_replaces_the_gone_one_each_attach_fails_and_the_next_tries_again() -> None:
    old = Controller("first")
    answers: list[Controller | None] = [old, None, None, Controller("second")]

    def attach() -> Controller:
        answer = answers.pop(0)
        if answer is None:
            raise TransferQueueNotFound("auto")
        return answer

    store = DeferredRowStore(attach)
    store.ensure_attached()
    old.gone = True
    for _ in range(2):
        with pytest.raises(StoreUnavailable, match="has the job created its TransferQueue yet"):
            store.ensure_attached()
        assert store.identity_space() is None
    store.ensure_attached()
    assert old.closed and store.identity_space() == "second"
