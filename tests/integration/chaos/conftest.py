"""Chaos fixtures: reaped CLI processes, and a job's partition with orphans and referenced rows.

Ray and the TransferQueue come from tests/support/ray_fixtures.py (this pytest process plays the
training job); the partition is `tq_partition`'s, cleared after the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.testbed.redis_server import KillableRedisServer
from tq_gc import AdmissionRegistry

from .helpers import Job, Processes, write_config, write_manifest

GRACE_S = 1.0
DELETE_BATCH = 100
ORPHANS = 3000
ADMITTED = 40
MANIFESTED = 40
ADMISSION_TTL_S = 600.0
KILL_AFTER = 1000  # rows deleted before the chaos strikes: well into the delete phase
# The test polls TQ and strikes once KILL_AFTER rows are gone: the sweep must still be deleting then. A
# test process on a busy 2-core machine takes seconds to see it and strike (2.6 s was too few at load
# 15). The duty cycle, the one throttle, slows the deletes: after a re-check and clear of t seconds the
# sweeper pauses t * (1 - DUTY_CYCLE) / DUTY_CYCLE (19 t), so a batch takes at least 20 times its
# requests, and a busier machine slows them in proportion (the rest of the orphans, 20-80 batches of a
# few ms of requests each, take seconds: the time to strike).
DUTY_CYCLE = 0.05
# The fastest two requests (a re-check and a clear, each a Ray call to the controller) can be: what bounds
# the delete rate from above, DELETE_BATCH rows per MIN_PAIR_S / DUTY_CYCLE at most.
MIN_PAIR_S = 0.001
MAX_DELETES_PER_SECOND = DELETE_BATCH * DUTY_CYCLE / MIN_PAIR_S

MakeJob = Callable[..., Job]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Starts `tq-gc` processes; kills and reaps every one of them at the end of the test."""
    workdir = tmp_path / "cli"
    workdir.mkdir()
    running = Processes(workdir)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def own_redis() -> Iterator[KillableRedisServer]:
    """A redis-server of this test's own, to kill mid-sweep; stopped at the end whatever happened."""
    server = KillableRedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_job(ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, tmp_path: Path) -> MakeJob:
    """make_job(state_url, lease_ttl_s, grace_s): rows in the test's partition, their references, a config.

    Keys row-00000...: every ORPHANS+ADMITTED+MANIFESTED of them in one partition, the referenced ones
    spread among the orphans (so that they share delete batches' key ranges)."""

    def make(state_url: str, lease_ttl_s: float = 30.0, grace_s: float = GRACE_S) -> Job:
        total = ORPHANS + ADMITTED + MANIFESTED
        keys = [f"row-{i:05d}" for i in range(total)]
        step = total // (ADMITTED + MANIFESTED)
        referenced = keys[::step][: ADMITTED + MANIFESTED]
        admitted, manifested = set(referenced[::2]), set(referenced[1::2])
        orphans = set(keys) - admitted - manifested
        assert (len(orphans), len(admitted), len(manifested)) == (ORPHANS, ADMITTED, MANIFESTED)
        put_rows(tq_partition, keys)

        namespace = f"chaos-{uuid.uuid4().hex[:8]}"
        with AdmissionRegistry.connect(state_url, namespace=namespace) as registry:
            registry.admit("trainer-step-7", {tq_partition: sorted(admitted)}, ttl_seconds=ADMISSION_TTL_S)
        manifests = tmp_path / "ckpt"
        write_manifest(manifests, tq_partition, sorted(manifested))
        config = write_config(
            tmp_path / "tq-gc.yaml",
            namespace=namespace,
            state_url=state_url,
            transfer_queue={"ray_address": ray_cluster.address},
            scope=[{"partition": tq_partition, "all_keys": True}],
            grace_seconds=grace_s,
            allow_short_grace=True,
            manifests=[{"glob": f"{manifests}/**/gc-manifest.json"}],
            limits={"max_delete_fraction": 1.0},  # nearly all of the partition is orphans, on purpose
        )
        return Job(
            tq_partition,
            config,
            namespace,
            orphans,
            admitted,
            manifested,
            state_url,
            DELETE_BATCH,
            lease_ttl_s,
            DUTY_CYCLE,
        )

    return make
