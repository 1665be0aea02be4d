"""Stores that record calls and let a test slip actions in between two steps of a sweep.

A hook point is a call the sweep makes to a store: any RowStore method of the row store, and any public
method of the state, by name. Arguments pass through untouched (*args, **kwargs), so the hooks outlive
signature changes. Calls a store makes to itself (MemoryState.recheck renewing the lease) are part of
one step, as they are one round trip on Redis.

An action run from a hook (a publisher, a second sweeper) makes calls too: those are neither recorded
nor hooked, so the hook points of a sweep are its own calls. Spies see every outermost call, whoever
makes it, with its result: that is how a test checks each delete as it happens.

A sweep turns any exception into an aborted report, so an assertion failing in a spy or an action
would pass unnoticed: the timeline keeps every exception they raise (and still raises it), and a test
calls `raise_errors()` after the sweep.

Stores may share one Timeline: a position in it is a hook point across both stores, so a test can
enumerate every step of a sweep ("before its 5th call, whatever it is") and slip an action at each.
"""

from __future__ import annotations

import inspect
import secrets
import threading
from collections.abc import Callable, Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from tq_gc.state.memory import MemoryState
from tq_gc.stores.base import DELETE_BATCH_ROWS, RowStore
from tq_gc.stores.memory import MemoryRowStore

Action = Callable[[], None]
# (method, args, kwargs, result): called after every outermost call that returned
Spy = Callable[[str, tuple[Any, ...], dict[str, Any], Any], None]


@dataclass(frozen=True, slots=True)
class Call:
    store: str  # "rows" or "state"
    method: str
    target: str  # the first string argument (a partition, an admission id), or ""
    n: int  # the length of the second argument (keys of a batch), or 0
    position: int  # index in the timeline

    def describe(self) -> str:
        return f"#{self.position} {self.store}.{self.method}({self.target})"


class Timeline:
    """The recorded calls of one or more stores, in order, and actions waiting at positions in it."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._at: dict[int, list[Action]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.errors: list[BaseException] = []  # raised by actions and spies, whoever caught them since

    @property
    def position(self) -> int:
        """The position the next recorded call will take."""
        return len(self.calls)

    def at(self, position: int, action: Action) -> None:
        """Run `action` once, right before the call that takes `position` (if one ever does)."""
        with self._lock:
            self._at.setdefault(position, []).append(action)

    def pending(self) -> int:
        """Actions still waiting (their position was never reached)."""
        with self._lock:
            return sum(len(actions) for actions in self._at.values())

    def clear(self) -> None:
        with self._lock:
            self._at.clear()

    @property
    def acting(self) -> bool:
        """True while a hook's action runs (on this thread): its calls are not hook points."""
        return bool(getattr(self._local, "acting", False))

    def act(self, actions: list[Action]) -> None:
        with self.quietly():
            for action in actions:
                self.noting_errors(action)

    def noting_errors(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except BaseException as exc:
            self.errors.append(exc)
            raise

    def raise_errors(self) -> None:
        """Raise the first exception an action or a spy raised (a sweep may have swallowed it)."""
        if self.errors:
            first, self.errors = self.errors[0], []
            raise first

    @contextmanager
    def quietly(self) -> Iterator[None]:
        """Calls made inside are neither recorded nor hooked (spies still see them): a test's own reads."""
        was = self.acting
        self._local.acting = True
        try:
            yield
        finally:
            self._local.acting = was

    def take(self, position: int) -> list[Action]:
        with self._lock:
            return self._at.pop(position, [])


@dataclass
class Hook:
    method: str
    action: Action
    at_call: int
    fired: bool = False


class Script:
    """Recording, hooks and spies; mixed into a store whose hookable methods are wrapped by `_script`."""

    _label = ""

    def _init_script(self, timeline: Timeline | None) -> None:
        self.timeline = timeline or Timeline()
        self.calls: list[tuple[str, str, int]] = []  # this store's recorded calls: (method, target, n)
        self.hooks: list[Hook] = []
        self.spies: list[Spy] = []
        self._depth = threading.local()
        self._hooks_lock = threading.Lock()

    def before(self, method: str, action: Action, after_calls: int = 0) -> None:
        """Run `action` once, right before the (after_calls+1)-th call of `method` from now on."""
        self.hooks.append(Hook(method, action, after_calls + self.count(method)))

    def count(self, method: str) -> int:
        return sum(1 for name, _, _ in self.calls if name == method)

    def _script(self, names: list[str]) -> None:
        for name in names:
            setattr(self, name, self._scripted(name, getattr(self, name)))

    def _scripted(self, method: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def scripted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            if depth == 0 and not self.timeline.acting:
                self._enter(method, args)
            self._depth.n = depth + 1
            try:
                result = call(*args, **kwargs)
            finally:
                self._depth.n = depth
            if depth == 0:
                for spy in list(self.spies):
                    self.timeline.noting_errors(partial(spy, method, args, kwargs, result))
            return result

        scripted.__name__ = method
        return scripted

    def _enter(self, method: str, args: tuple[Any, ...]) -> None:
        self.timeline.act(self._due(method))
        target = next((arg for arg in args if isinstance(arg, str)), "")
        n = len(args[1]) if len(args) > 1 and isinstance(args[1], Sized) else 0
        call = Call(self._label, method, target, n, self.timeline.position)
        self.timeline.calls.append(call)
        self.calls.append((method, target, n))

    def _due(self, method: str) -> list[Action]:
        due = []
        with self._hooks_lock:
            for hook in self.hooks:
                if hook.method == method and not hook.fired and self.count(method) == hook.at_call:
                    hook.fired = True
                    due.append(hook.action)
        return due + self.timeline.take(self.timeline.position)


def _public_methods(cls: type) -> list[str]:
    return [name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")]


class ScriptedRowStore(Script, MemoryRowStore):
    """Hook points: the four methods every RowStore has its own of, and list_keys (what a sweep reads and
    deletes through); put/delete/keys are the test's own."""

    _label = "rows"

    def __init__(self, timeline: Timeline | None = None, delete_batch_rows: int = DELETE_BATCH_ROWS) -> None:
        MemoryRowStore.__init__(self, delete_batch_rows)
        self._init_script(timeline)
        self._script([*sorted(RowStore.__abstractmethods__), "list_keys"])


class ScriptedState(Script, MemoryState):
    """A memory state whose every public method is a hook point."""

    _label = "state"

    def __init__(self, *args: Any, timeline: Timeline | None = None, **kwargs: Any) -> None:
        MemoryState.__init__(self, *args, **kwargs)
        self._init_script(timeline)
        self._script(_public_methods(MemoryState))

    def restart_with_data(self) -> None:
        """What a Redis restarted with its data (an append-only file), or failed over to a replica, looks
        like to its clients: every key as it was, another server process answering."""
        self._server_run = secrets.token_hex(8)

    def restart_empty(self) -> None:
        """What a Redis restarted without persistence looks like: every key gone (lease, admissions,
        fences, first-seen records, runs, audit, the sources' baseline), another store id."""
        MemoryState.__init__(self, self.namespace, self.clock_ms)
