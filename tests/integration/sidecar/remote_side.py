"""Code the sidecar tests ship into Ray workers: row store factories for the actor (each wraps the
real TQ row store) and a publisher task.

It runs in Ray workers, which cannot import this test package: conftest.py has this module pickled by
value. Anything a test must read back (listing intervals) goes through a file, not memory.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import ray

from tq_gc import stores
from tq_gc.config import Config
from tq_gc.rows import Identity, Tags
from tq_gc.sidecar.client import sidecar_registry
from tq_gc.stores import RowStore, attach_transfer_queue
from tq_gc.stores.claims import StoreClaim
from tq_gc.wiring import StoreOptions

T = TypeVar("T")


class Wrapped(RowStore):
    """Forwards every RowStore method to the real store; subclasses override one."""

    def __init__(self, inner: RowStore) -> None:
        self.inner = inner

    def partitions(self) -> list[str]:
        return self.inner.partitions()

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return self.inner.list_rows(partition)

    def list_keys(self, partition: str) -> dict[str, int]:
        return self.inner.list_keys(partition)

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        return self.inner.identities(partition, keys)

    def delete_batches(self, partition: str, keys: Sequence[str]) -> Iterator[list[str]]:
        return self.inner.delete_batches(partition, keys)

    def delete_if_unchanged(self, partition: str, expected: Mapping[str, Identity]) -> set[str]:
        return self.inner.delete_if_unchanged(partition, expected)

    def ensure_attached(self) -> None:
        self.inner.ensure_attached()

    def identity_space(self) -> str | None:
        return self.inner.identity_space()

    def interrupt(self) -> None:
        self.inner.interrupt()

    def take_request_stats(self) -> dict[str, list[float]]:
        return self.inner.take_request_stats()

    def describe(self) -> dict[str, str]:
        return self.inner.describe()

    def claim(self, holder: str, where: str) -> StoreClaim | None:
        return self.inner.claim(holder, where)

    def close(self) -> None:
        self.inner.close()


class SlowListing(Wrapped):
    """Listing takes `delay_s`; each listing's start and end go to `events` as `+ t` / `- t` lines
    (monotonic clock, which is system-wide on Linux, so the test process can compare)."""

    def __init__(self, inner: RowStore, delay_s: float, events: Path) -> None:
        super().__init__(inner)
        self.delay_s = delay_s
        self.events = events

    def _event(self, sign: str) -> None:
        with self.events.open("a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.write(f"{sign} {time.monotonic():.6f}\n")

    def list_rows(self, partition: str) -> dict[str, Tags]:
        return self._slowly(lambda: self.inner.list_rows(partition))

    def list_keys(self, partition: str) -> dict[str, int]:
        return self._slowly(lambda: self.inner.list_keys(partition))

    def _slowly(self, listing: Callable[[], T]) -> T:
        self._event("+")
        try:
            time.sleep(self.delay_s)
            return listing()
        finally:
            self._event("-")


class FailingListing(Wrapped):
    """While the file `fail_while` exists, listing raises an unexpected error (not a StoreUnavailable,
    which the collector would turn into an aborted report): the sweep itself raises. Each failure
    appends a line to `failures`."""

    def __init__(self, inner: RowStore, fail_while: Path, failures: Path) -> None:
        super().__init__(inner)
        self.fail_while = fail_while
        self.failures = failures

    def list_rows(self, partition: str) -> dict[str, Tags]:
        self._fail_if_broken()
        return self.inner.list_rows(partition)

    def list_keys(self, partition: str) -> dict[str, int]:
        self._fail_if_broken()
        return self.inner.list_keys(partition)

    def _fail_if_broken(self) -> None:
        if self.fail_while.exists():
            with self.failures.open("a") as out:
                out.write("failed\n")
            raise RuntimeError("injected listing failure")


def slow_tq_store(config: Config, options: StoreOptions, delay_s: float, events: str) -> RowStore:
    return SlowListing(attach_transfer_queue(config, options), delay_s, Path(events))


def failing_tq_store(config: Config, options: StoreOptions, fail_while: str, failures: str) -> RowStore:
    return FailingListing(attach_transfer_queue(config, options), Path(fail_while), Path(failures))


def duty_noting_tq_store(config: Config, options: StoreOptions, noted: str) -> RowStore:
    """The job's TQ, attached at the duty cycle the sidecar hands its factory, which is noted in `noted`."""
    Path(noted).write_text(repr(options.duty_cycle))
    return attach_transfer_queue(config, options)


def max_concurrency(events: Path) -> tuple[int, int]:
    """(most listings in progress at once, listings started), from the event file."""
    running = peak = started = 0
    lines = sorted(events.read_text().split("\n")[:-1], key=lambda line: (float(line[2:]), line[0] == "+"))
    for line in lines:
        if line[0] == "+":
            running += 1
            started += 1
            peak = max(peak, running)
        else:
            running -= 1
    return peak, started


@ray.remote(num_cpus=0.1)
def admit_and_vanish(sidecar_name: str, ray_namespace: str, partition: str, key: str, ttl_s: float) -> None:
    """A publisher in a Ray worker: admits one row through the sidecar, then never renews it."""
    registry = sidecar_registry(name=sidecar_name, namespace=ray_namespace)
    registry.admit(f"vanishing-{key}", rows={partition: [key]}, ttl_seconds=ttl_s)


def transfer_queue_imported(_actor: Any) -> bool:
    """Run in the sidecar's process (`__ray_call__`): has it imported TransferQueue (and is that import
    over)?"""
    return stores.transfer_queue_imported()
