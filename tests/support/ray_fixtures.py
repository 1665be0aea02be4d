"""The Ray and TransferQueue fixtures, one real Ray cluster and one real TransferQueue for the whole
session: a pytest plugin, registered by tests/conftest.py, so that every suite (contract, integration,
chaos, sidecar) reaches them without a copy.

    ray_cluster    a Ray head started as its own processes (tools/testbed/ray_head.py), so that
                   subprocesses (the tq-gc CLI) can join it at `ray_cluster.address`; this process
                   is connected to it as a driver
    tq             the `transfer_queue` module, with a TQ created by this process: pytest plays the
                   training job (the controller is not detached and lives as long as this driver)
    tq_partition   a fresh partition name per test; its keys are cleared afterwards
    put_rows       writes keyed rows (data and tags, or tags only) into TQ
    bare_ray_cluster  a second, tiny Ray head with no TQ at all, for one test's lifetime
    run_python     runs a Python snippet in a fresh interpreter (a process outside pytest)
    record_timing  record_timing(name, seconds): printed in the session's timings section

Everything is started lazily: tests that use none of these fixtures start no Ray. Tests that do
should carry `pytestmark = pytest.mark.ray`. Ray on a 2-core machine: 4 logical CPUs for the head
(controller + 2 storage units need 3), polling-mode controller.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from tools.testbed.ray_head import RAY_TEST_ENV, REPO_ROOT, TQ_TEST_CONF, RayCluster, RayHead, subprocess_env

SUBPROCESS_TIMEOUT_S = 120.0
PUT_BATCH = 2000
# A test on Ray may be the one that starts the session's cluster (`ray start` may take RAY_START_TIMEOUT_S
# on a busy machine, then tq.init) before its own work: more than the suite's default timeout. At load 20
# on 2 cores, starting the cluster took 138 s and the leak scenario's own work 162 s.
RAY_TEST_TIMEOUT_SECONDS = 600
RAY_FIXTURES = frozenset({"ray_cluster", "bare_ray_cluster"})
# The Ray tests mostly wait: two clusters halve their share of the suite's time on 2 cores.
RAY_GROUPS = 2

# name -> seconds; printed at the end of the session (see pytest_terminal_summary)
TIMINGS: dict[str, float] = {}


def _record_timing(name: str, seconds: float) -> None:
    TIMINGS[name] = seconds


@pytest.fixture(scope="session")
def record_timing() -> Callable[[str, float], None]:
    """record_timing(name, seconds): listed in the session's "Ray / TransferQueue timings" section."""
    return _record_timing


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.section("Ray / TransferQueue timings")
        for name, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{name:<48} {seconds:8.3f} s")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test that needs a Ray cluster (marked `ray`, or using a Ray fixture) gets
    RAY_TEST_TIMEOUT_SECONDS, unless it names a timeout of its own, and joins one of RAY_GROUPS xdist
    groups by its file: under `-n`, RAY_GROUPS workers run them, each on its session cluster, instead of
    every worker starting its own.
    (At collection, before pytest-xdist reads the groups in its pytest_collection_modifyitems.)"""
    uses_ray = RAY_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    needs_ray = uses_ray or item.get_closest_marker("ray") is not None
    if needs_ray and item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(RAY_TEST_TIMEOUT_SECONDS))
    if needs_ray:
        item.add_marker(pytest.mark.xdist_group(f"ray-{zlib.crc32(item.path.name.encode()) % RAY_GROUPS}"))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """The session's Ray cluster, with this process connected to it as a driver."""
    import ray

    saved_env = {name: os.environ.get(name) for name in RAY_TEST_ENV}
    os.environ.update(RAY_TEST_ENV)
    head = RayHead(num_cpus=4)
    try:
        head.start()
        _record_timing("ray start --head (session cluster)", head.started_in_s)
        started = time.monotonic()
        ray.init(address=head.address, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        _record_timing("ray.init from pytest (join)", time.monotonic() - started)
        yield RayCluster(head.address, head.client_address, head.temp_dir)
    finally:
        ray.shutdown()
        started = time.monotonic()
        head.stop()
        _record_timing("stop session cluster", time.monotonic() - started)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def tq(ray_cluster: RayCluster) -> Iterator[Any]:
    """The `transfer_queue` module with a real TQ that this process created (and so may close)."""
    import ray
    import transfer_queue

    try:
        ray.get_actor("TransferQueueController", namespace="transfer_queue")
    except ValueError:
        pass
    else:
        raise RuntimeError("the session's fresh Ray cluster already has a TransferQueueController")
    started = time.monotonic()
    transfer_queue.init(TQ_TEST_CONF)
    _record_timing("tq.init (controller + 2 storage units)", time.monotonic() - started)
    # No teardown of its own: the controller and storage units are not detached, so they end with this
    # driver's Ray connection, which ray_cluster closes before it stops the head.
    yield transfer_queue


@contextlib.contextmanager
def fresh_partition(tq: Any, prefix: str = "tqgc-test") -> Iterator[str]:
    """A partition name no other test uses; whatever keys it holds afterwards are cleared."""
    partition = f"{prefix}-{uuid.uuid4().hex[:10]}"
    yield partition
    keys = list(tq.kv_list(partition).get(partition, {}))
    for start in range(0, len(keys), PUT_BATCH):
        tq.kv_clear(keys[start : start + PUT_BATCH], partition)


def reusable_indexes(tq: Any) -> int:
    """How many freed global indexes TQ holds for reuse (handed out first in, first out)."""
    import ray

    controller = ray.get_actor("TransferQueueController", namespace="transfer_queue")
    return int(ray.get(controller._build_metrics_snapshot.remote())["global_index_reusable"])


@pytest.fixture
def tq_partition(tq: Any) -> Iterator[str]:
    with fresh_partition(tq) as partition:
        yield partition


PutRows = Callable[..., None]


@pytest.fixture
def put_rows(tq: Any) -> PutRows:
    """put_rows(partition, keys, tags=None, data=True): write keyed rows, in batches.

    `tags` is one mapping for every row, or a sequence with one per key. data=False writes tags only
    (TQ registers the keys without data, like a put that died halfway: a ghost key)."""
    import torch
    from tensordict import TensorDict

    def put(
        partition: str,
        keys: Sequence[str],
        tags: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        data: bool = True,
    ) -> None:
        keys = list(keys)
        if tags is None or isinstance(tags, Mapping):
            per_key = [dict(tags or {}) for _ in keys]
        else:
            per_key = [dict(t) for t in tags]
        for start in range(0, len(keys), PUT_BATCH):
            batch = keys[start : start + PUT_BATCH]
            batch_tags = per_key[start : start + PUT_BATCH]
            fields = TensorDict({"x": torch.zeros(len(batch), 4)}, batch_size=len(batch)) if data else None
            tq.kv_batch_put(keys=batch, partition_id=partition, fields=fields, tags=batch_tags)

    return put


@pytest.fixture
def bare_ray_cluster() -> Iterator[RayCluster]:
    """A second Ray cluster with no TQ, for one test. This process does not join it."""
    head = RayHead(num_cpus=1)
    try:
        head.start()
        _record_timing("ray start --head (bare cluster, 1 CPU)", head.started_in_s)
        yield RayCluster(head.address, head.client_address, head.temp_dir)
    finally:
        head.stop()


RunPython = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_python() -> RunPython:
    """run_python(code, timeout_seconds=...): run `code` in a fresh interpreter of this venv."""

    def run(code: str, timeout_seconds: float = SUBPROCESS_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_seconds,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )

    return run
