"""A job whose TransferQueue controller dies and is replaced (the job runs `transfer_queue.init` again):
the long-lived sweeper (the sidecar's DeferredRowStore over TransferQueueRowStore) attaches to the new
controller at its next sweep, instead of failing every sweep until tq-gc restarts; while there is none,
each sweep ends aborted with nothing deleted. And the new TQ's rows are not the old one's: a new
controller issues global indexes afresh, so a first-seen record made against the old one can carry the
very identity (key, global index, tags) of a new row, and must not make that row deletable on sight.

Everything runs on a Ray head of this test's own (the session's TQ must live on): the job and the
sweeper are processes of their own, as they are in production."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from harness import wait_until

from tools.testbed.ray_head import REPO_ROOT, TQ_TEST_CONF, RayHead, subprocess_env

pytestmark = pytest.mark.ray

PARTITION = "replaced-staging"
KEYS = [f"k{i}" for i in range(4)]
GRACE_SECONDS = 60

# The training job: joins the cluster, creates its TQ (saying whether one was there already: tq-gc
# must never have made one), writes the rows, and lives until killed. Its controller is not detached:
# it dies with this driver.
JOB = """
import json, sys
import ray, torch, transfer_queue as tq
from tensordict import TensorDict
address, conf, partition, keys = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
ray.init(address=address, log_to_driver=False, logging_level="WARNING")
try:
    ray.get_actor("TransferQueueController", namespace="transfer_queue")
    found = "found"
except ValueError:
    found = "created"
tq.init(conf)
fields = TensorDict({"x": torch.zeros(len(keys), 4)}, batch_size=len(keys))
tq.kv_batch_put(keys=keys, partition_id=partition, fields=fields, tags=[{"step": 1} for _ in keys])
print(found, flush=True)
sys.stdin.read()
"""

# The sweeper: one Collector and one DeferredRowStore for its life, as in the sidecar, on a manual clock.
# Commands on stdin, one JSON answer a line on stdout.
SWEEPER = """
import json, sys
from tq_gc.sweep import Collector
from tq_gc.config import parse_config
from tools.testbed.clock import ManualClock
from tq_gc.state.memory import MemoryState
from tq_gc.stores.deferred import DeferredRowStore
from tq_gc.stores.transferqueue import TransferQueueRowStore

config = parse_config(json.loads(sys.argv[1]))
clock = ManualClock()
state = MemoryState(config.namespace, clock_ms=clock)
rows = DeferredRowStore(
    lambda: TransferQueueRowStore.attach(config.transfer_queue, request_timeout_seconds=10)
)
collector = Collector(config, state, rows, holder="test")
for line in sys.stdin:
    command, *args = line.split()
    if command == "age":
        clock.advance(float(args[0]))
        answer = {}
    elif command == "sweep":
        report = collector.sweep(dry_run=False)
        counts = report.counts
        answer = {"outcome": report.outcome.value, "reason": report.reason,
                  "deleted": counts.deleted, "within_grace": counts.within_grace}
    else:  # identities
        try:
            rows.ensure_attached()
            found = rows.identities(args[0], args[1].split(","))
            answer = {key: [ident.tags_digest, ident.global_index] for key, ident in found.items()}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
"""


class Process:
    """A Python process of this venv, spoken to a line at a time."""

    def __init__(self, code: str, *args: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )

    def read_line(self) -> str:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            self.popen.wait(30)
            assert self.popen.stderr is not None
            raise AssertionError(f"exited {self.popen.returncode}: {self.popen.stderr.read()[-4000:]}")
        return line.strip()

    def ask(self, command: str) -> Any:
        assert self.popen.stdin is not None
        self.popen.stdin.write(command + "\n")
        self.popen.stdin.flush()
        return json.loads(self.read_line())

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(30)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def own_ray_head() -> Iterator[RayHead]:
    head = RayHead(num_cpus=4).start()
    try:
        yield head
    finally:
        head.stop()


def start_job(head: RayHead) -> tuple[Process, str]:
    """The job's driver with its new TQ and rows, and what it found: "created" (no TQ was there)."""
    job = Process(JOB, head.address, json.dumps(TQ_TEST_CONF), PARTITION, ",".join(KEYS))
    return job, job.read_line()


def test_a_replaced_controller_is_attached_afresh_and_its_rows_start_their_grace_anew(
    own_ray_head: RayHead,
) -> None:
    config = {
        "namespace": "replaced",
        "scope": [{"partition": PARTITION, "all_keys": True}],
        "grace_seconds": GRACE_SECONDS,
        "transfer_queue": {"ray_address": own_ray_head.address},
        "limits": {"max_delete_fraction": 1.0},
    }
    job, found = start_job(own_ray_head)
    sweeper = Process(SWEEPER, json.dumps(config))
    try:
        assert found == "created"
        first = sweeper.ask("sweep")
        assert (first["outcome"], first["within_grace"]) == ("completed", 4), first
        sweeper.ask(f"age {GRACE_SECONDS * 2 // 3}")
        assert sweeper.ask("sweep")["within_grace"] == 4  # observed again: the records stay trusted
        old = sweeper.ask(f"identities {PARTITION} {','.join(KEYS)}")

        job.kill()  # the job's driver dies, and its controller with it
        dead = wait_until(
            "a sweep that finds the controller gone",
            lambda: (report := sweeper.ask("sweep"))["outcome"] == "aborted" and report,
            timeout_seconds=120,
        )
        assert dead["deleted"] == 0 and "TransferQueue" in dead["reason"], dead

        job, found = start_job(own_ray_head)  # the job comes back: transfer_queue.init again
        assert found == "created", "tq-gc never makes a TQ of its own"
        new = sweeper.ask(f"identities {PARTITION} {','.join(KEYS)}")
        assert new == old, "the new TQ issues the same identities: the old records would match them"

        # Past the grace of the first sightings in the old TQ, within a grace of the last observation.
        sweeper.ask(f"age {GRACE_SECONDS // 2}")
        again = sweeper.ask("sweep")
        assert again["outcome"] == "completed", again
        assert (again["deleted"], again["within_grace"]) == (0, 4), "first seen in the new TQ only now"

        sweeper.ask(f"age {GRACE_SECONDS}")
        later = sweeper.ask("sweep")
        assert (later["outcome"], later["deleted"]) == ("completed", 4), later
        assert sweeper.ask(f"identities {PARTITION} {','.join(KEYS)}") == {}
    finally:
        sweeper.kill()
        job.kill()
