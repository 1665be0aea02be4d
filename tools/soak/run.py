"""The soak: a real TQ, real Redis and Ray, make-before-break publishers, orphan leakers, three sweepers
and chaos, for N minutes; then one verdict line. See tools/soak/__init__.py."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from tools.testbed.cli import TQ_GC, cli_env
from tools.testbed.ray_head import RAY_TEST_ENV, TQ_TEST_CONF, RayHead
from tools.testbed.redis_server import KillableRedisServer
from tq_gc import AdmissionRegistry, load_config, start_sidecar

from .job import (
    CANONICAL,
    ROUTE_PLAN_KEY_PATH,
    STAGING,
    ActorSwitches,
    JobTq,
    Leaker,
    Pace,
    Publisher,
    RedisRestarts,
    Timing,
    route_plan_tags,
    write_manifest,
)
from .sweepers import CLI_TIMEOUT_S, CliLoopSettings, CliSweeperLoop, SidecarWatcher, SweepTally
from .truth import ADMISSION, MANIFEST, TAG, GroundTruth, Holder, Violation

log = logging.getLogger("soak")

ANCHOR_TAGGED = "anchor/tagged"
PUT_BATCH = 2000
OVERDUE_SHOWN = 20
# Calm publishers move rows between all three kinds every few seconds; hot ones flip a few rows
# admission <-> tag back to back, so that some move is in flight whenever a sweep reads its references.
CALM = Pace(tick_s=0.4, rows_held=6, moves_per_row=(1, 6))
HOT = Pace(tick_s=0.05, rows_held=1, moves_per_row=(40, 200), kinds=(ADMISSION, TAG), switch_kind=True)
# Hot rows that hop between all three kinds every 0.2-0.5 s, manifests included (written by rename,
# removed by unlink or retire, no fence), each move inside an admission: many hops per sweep.
HOT_HOPS = Pace(tick_s=0.35, rows_held=1, moves_per_row=(30, 120), switch_kind=True, fenced_manifests=False)


@dataclass(frozen=True)
class SoakSettings:
    minutes: float
    seed: int
    # Longer than the usual gap between two sweeps (a CLI holds the lease while it joins Ray, a killed
    # one until its TTL): with a shorter grace every orphan's clock restarts before it is due, and no
    # delete ever races the moves.
    grace_s: float = 15.0
    lease_ttl_s: float = 5.0  # the shortest tq-gc accepts
    interval_s: float = 1.0
    # The sidecar's listings reuse an index range this long (sweeps every second): a row put meanwhile
    # at an index the range lacks is first seen up to this much later.
    index_range_reuse_s: float = 5.0
    # Renewed every second, so a Redis restart is noticed within one; long enough that a publisher
    # thread stalled on a loaded box does not let it lapse (counted as "lapses" if it does).
    admission_ttl_seconds: float = 10.0
    renew_every_s: float = 1.0
    fence_ttl_s: float = 5.0
    tick_s: float = 0.4  # the leaker's pace
    calm: Pace = CALM
    calm_publishers: int = 3
    hot: Pace = HOT
    hot_publishers: int = 3
    hopping: Pace = HOT_HOPS
    hopping_publishers: int = 3
    cli_pause_s: tuple[float, float] = (1.0, 4.0)
    kill_chance: float = 0.6
    kill_after_s: tuple[float, float] = (1.0, 10.0)  # a CLI needs ~3-6 s to start: kills fall before and in
    # Each restart forgets every first sighting: restarts more often than a grace plus a sweep would
    # leave nothing due while the chaos runs.
    redis_restart_every_s: tuple[float, float] = (40.0, 80.0)
    checkpoint_every_s: tuple[float, float] = (12.0, 25.0)
    checkpoint_window_s: float = 3.0
    check_every_s: float = 2.0
    bulk_rows: int = 50000
    bulk_samples: int = 2000

    @property
    def overdue_s(self) -> float:
        """An orphan still there this long after it became one is a sweeper's failure."""
        return self.grace_s + 2 * self.interval_s + self.index_range_reuse_s

    @property
    def settle_s(self) -> float:
        """After the chaos, the sidecar sweeps on for at least grace + 3 intervals ..."""
        return self.grace_s + 3 * self.interval_s + self.index_range_reuse_s

    @property
    def settle_at_most_s(self) -> float:
        """... and until it has had its chance at every orphan (a completed sweep after the last one
        appeared, then sweeps up to one a grace later; a killed CLI's lease may hold it off a while),
        but no longer than this."""
        return 120.0


@dataclass
class Verdict:
    settings: SoakSettings
    violations: list[Violation]
    overdue: list[str]
    reclaimed: int
    tally: SweepTally
    errors: list[str]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> list[Violation]:
        """Rows deleted while referenced, but for those whose admission the soak itself let lapse."""
        return [v for v in self.violations if not v.lapsed]

    @property
    def passed(self) -> bool:
        """Nothing referenced lost, nothing overdue, and some rows deleted while references moved:
        without deletes during the chaos, "nothing lost" would not have been put to the test."""
        tested = self.tally.deleted_in_chaos > 0
        return not self.lost and not self.overdue and tested and not self.errors

    def line(self) -> str:
        outcomes, named = self.tally.outcomes, ("completed", "skipped", "aborted")
        main = " ".join(f"{name}={outcomes[name]}" for name in named)
        extra = "".join(f" {name}={n}" for name, n in sorted(outcomes.items()) if name not in named)
        errors = f", soak errors={len(self.errors)} (verdict void)" if self.errors else ""
        lapsed = len(self.violations) - len(self.lost)
        if lapsed:
            errors += f", {lapsed} more deleted after the soak let their admission lapse"
        return (
            f"soak: {len(self.lost)} referenced rows deleted, {len(self.overdue)} orphans older than "
            f"grace+2 intervals left, sweeps: {main}{extra} (rows deleted={self.tally.rows_deleted()}, "
            f"during chaos={self.tally.deleted_in_chaos}, orphans reclaimed={self.reclaimed}, "
            f"minutes={self.settings.minutes:g}, seed={self.settings.seed}){errors}"
        )


class Checker(threading.Thread):
    """Every few seconds: is every referenced row still in TQ? (Publishers also ask, for each row, right
    before they drop its last reference; the driver asks once more at the end.)"""

    def __init__(self, tq: JobTq, truth: GroundTruth, every_s: float, switches: ActorSwitches) -> None:
        super().__init__(name="checker", daemon=True)
        self._tq, self._truth, self._every_s, self._switches = tq, truth, every_s, switches
        self.checks = 0

    def run(self) -> None:
        try:
            while not self._switches.stop.wait(self._every_s):
                self.check("periodic check")
        except Exception as exc:
            log.exception("checker crashed")
            self._switches.errors.append(f"checker: {type(exc).__name__}: {exc}")

    def check(self, detected_by: str) -> None:
        referenced = self._truth.referenced_rows()  # before the listing ...
        present = self._tq.keys(STAGING)
        self.checks += 1
        for key, epoch in referenced.items():
            # ... and after it, in the same state: referenced all along, so deleted while referenced
            if key not in present and self._truth.still_referenced(key, epoch):
                found = self._truth.violation(key, detected_by)
                if found is not None:
                    log.error("REFERENCED ROW DELETED: %s (last move %s)", key, found.last_move)


class RedisChaos(threading.Thread):
    """Restarts Redis empty (SHUTDOWN NOSAVE, start again on the same port) at random moments."""

    def __init__(
        self,
        redis: KillableRedisServer,
        restarts: RedisRestarts,
        seed: int,
        every_s: tuple[float, float],
        switches: ActorSwitches,
    ) -> None:
        super().__init__(name="redis-chaos", daemon=True)
        self._redis, self._restarts, self._every_s, self._switches = redis, restarts, every_s, switches
        self._rng = random.Random(seed)

    def run(self) -> None:
        try:
            while sleep_through_chaos(self._switches, self._rng.uniform(*self._every_s)):
                self._restarts.count += 1  # before: a renew that finds its admission gone sees it
                started = time.monotonic()
                self._redis.restart_empty()
                log.info(
                    "Redis restarted empty (#%d, down %.2f s)",
                    self._restarts.count,
                    time.monotonic() - started,
                )
        except Exception as exc:
            log.exception("redis chaos crashed")
            self._switches.errors.append(f"redis-chaos: {type(exc).__name__}: {exc}")


class Checkpoints(threading.Thread):
    """The job checkpoints now and then: for `window_s` every `every_s` (a range) publishers may change
    manifests (each change fenced); between checkpoints no fence goes up, and sweeps can delete."""

    def __init__(
        self, seed: int, every_s: tuple[float, float], window_s: float, switches: ActorSwitches
    ) -> None:
        super().__init__(name="checkpoints", daemon=True)
        self._rng = random.Random(seed)
        self._every_s, self._window_s, self._switches = every_s, window_s, switches

    def run(self) -> None:
        try:
            while sleep_through_chaos(self._switches, self._rng.uniform(*self._every_s)):
                self._switches.checkpointing.set()
                sleep_through_chaos(self._switches, self._window_s)
                self._switches.checkpointing.clear()
        except Exception as exc:
            log.exception("checkpoints crashed")
            self._switches.errors.append(f"checkpoints: {type(exc).__name__}: {exc}")
        finally:
            self._switches.checkpointing.clear()


def sleep_through_chaos(switches: ActorSwitches, seconds: float) -> bool:
    """Sleep; False as soon as the chaos is over."""
    deadline = time.monotonic() + seconds
    while switches.chaos.is_set() and not switches.stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        switches.stop.wait(min(left, 0.5))
    return False


class Soak:
    def __init__(self, settings: SoakSettings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        self.truth = GroundTruth()
        self.tally = SweepTally()
        self.switches = ActorSwitches()
        self.restarts = RedisRestarts()
        self._rng = random.Random(settings.seed)

    def run(self) -> Verdict:
        with contextlib.ExitStack() as stack:
            self._start_services(stack)
            self._write_anchors()
            self._start_actors(stack)
            self._start_sweepers(stack)
            log.info("chaos on for %g min", self.settings.minutes)
            self._sleep_or_fail(self.settings.minutes * 60)
            self._end_chaos()
            self._settle()
            return self._verdict()
        raise AssertionError("unreachable")

    # -- services: Redis, Ray, the job's TQ, the sidecar -------------------------------------------------

    def _start_services(self, stack: contextlib.ExitStack) -> None:
        import ray

        self.redis = KillableRedisServer()
        self.redis.start()
        stack.callback(self.redis.stop)
        os.environ.update(RAY_TEST_ENV)
        os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")  # before TQ's import, here and in Ray's workers
        head = RayHead(num_cpus=4).start()
        stack.callback(head.stop)
        log.info(
            "Redis on port %d, Ray head at %s (%.1f s)", self.redis.port, head.address, head.started_in_s
        )
        ray.init(
            address=head.address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
        )
        stack.callback(ray.shutdown)  # the job's TQ controller and storage end with this driver
        # ray.init installed Ray's own SIGTERM handler, which aborts the process: ours again, on top.
        stack.enter_context(terminated_cleanly(self.switches.errors))
        import transfer_queue

        transfer_queue.init(TQ_TEST_CONF)
        self.tq = JobTq(transfer_queue)
        self.config_path = self._write_config(head.address)
        self.sidecar = start_sidecar(load_config(self.config_path))
        stack.callback(self._stop_sidecar)
        log.info("TQ and sidecar up")

    def _write_config(self, ray_address: str) -> Path:
        s = self.settings
        self.manifest_dir = self.workdir / "ckpt"
        config = {
            "namespace": f"soak-{s.seed}-{uuid.uuid4().hex[:6]}",
            "state_url": self.redis.url,
            "transfer_queue": {
                "ray_address": ray_address,
                "index_range_reuse_seconds": s.index_range_reuse_s,
            },
            "scope": [{"partition": STAGING, "all_keys": True}],
            "grace_seconds": s.grace_s,
            "allow_short_grace": True,
            "lease_ttl_seconds": s.lease_ttl_s,
            "manifests": [{"glob": f"{self.manifest_dir}/**/gc-manifest.json"}],
            "tag_references": [
                {"partition": CANONICAL, "key_path": ROUTE_PLAN_KEY_PATH, "target_partition": STAGING}
            ],
            "limits": {"max_delete_fraction": 1.0, "delete_batch": 50},
            "schedule": {"interval_seconds": s.interval_s, "misfire_grace_seconds": 5},
            "sidecar": {"name": f"tq-gc-soak-{uuid.uuid4().hex[:6]}", "ray_namespace": "tq_gc_soak"},
        }
        self.namespace = str(config["namespace"])
        path = self.workdir / "tq-gc.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _stop_sidecar(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.get(self.sidecar.shutdown.remote(), timeout=30)
        with contextlib.suppress(Exception):
            ray.kill(self.sidecar, no_restart=True)

    def _write_anchors(self) -> None:
        """Rows referenced for the whole soak: one named by a sample's route plan, and a checkpoint's
        bulk (a manifest naming `bulk_rows` rows, `bulk_samples` of them named by samples too). Both
        partitions and the manifest directory exist before the first sweep, and every sweep lists a
        job-sized partition: a listing of a few rows would leave moves almost no window to be missed in."""
        s = self.settings
        bulk = [f"bulk/r{i:05d}_g0_a1/call0" for i in range(s.bulk_rows)]
        samples = [f"bulk{i:05d}_g0" for i in range(s.bulk_samples)]
        for key in [ANCHOR_TAGGED, *bulk]:
            self.truth.new_row(key, "anchor")
        self._put_in_batches(CANONICAL, ["anchor_g0"], [route_plan_tags([ANCHOR_TAGGED])])
        self.truth.add_holder(ANCHOR_TAGGED, Holder(TAG, "anchor_g0"))
        path = self.manifest_dir / "anchor" / "gc-manifest.json"
        write_manifest(path, "anchor", {STAGING: bulk})
        for key in bulk:
            self.truth.add_holder(key, Holder(MANIFEST, str(path)))
        self._put_in_batches(CANONICAL, samples, [route_plan_tags([key]) for key in bulk[: len(samples)]])
        for sample, key in zip(samples, bulk, strict=False):
            self.truth.add_holder(key, Holder(TAG, sample))
        self._put_in_batches(STAGING, [ANCHOR_TAGGED, *bulk], [{"schema_version": 1}] * (len(bulk) + 1))
        for key in [ANCHOR_TAGGED, *bulk]:
            self.truth.written(key)

    def _put_in_batches(self, partition: str, keys: list[str], tags: list[dict[str, Any]]) -> None:
        for start in range(0, len(keys), PUT_BATCH):
            self.tq.put(partition, keys[start : start + PUT_BATCH], tags[start : start + PUT_BATCH])

    # -- actors and sweepers --------------------------------------------------------------------------

    def _registry(self, stack: contextlib.ExitStack) -> AdmissionRegistry:
        registry = AdmissionRegistry.connect(self.redis.url, namespace=self.namespace)
        stack.callback(registry.close)
        return registry

    def _start_actors(self, stack: contextlib.ExitStack) -> None:
        s = self.settings
        timing = Timing(s.admission_ttl_seconds, s.renew_every_s, s.fence_ttl_s, s.tick_s)
        paces = [s.calm] * s.calm_publishers + [s.hot] * s.hot_publishers + [s.hopping] * s.hopping_publishers
        self.publishers = [
            Publisher(
                n,
                self._seed(),
                self.tq,
                self._registry(stack),
                self.manifest_dir,
                self.truth,
                timing,
                self.restarts,
                self.switches,
                pace,
            )
            for n, pace in enumerate(paces)
        ]
        self.leaker = Leaker(self._seed(), self.tq, self._registry(stack), self.truth, timing, self.switches)
        self.checker = Checker(self.tq, self.truth, s.check_every_s, self.switches)
        self.redis_chaos = RedisChaos(
            self.redis, self.restarts, self._seed(), s.redis_restart_every_s, self.switches
        )
        self.checkpoints = Checkpoints(
            self._seed(), s.checkpoint_every_s, s.checkpoint_window_s, self.switches
        )
        threads: list[threading.Thread] = [
            *self.publishers,
            self.leaker,
            self.checker,
            self.redis_chaos,
            self.checkpoints,
        ]
        stack.callback(self._join, threads)
        self.switches.chaos.set()
        for thread in threads:
            thread.start()

    def _start_sweepers(self, stack: contextlib.ExitStack) -> None:
        s = self.settings
        env = {**cli_env(), "TQ_LOGGING_LEVEL": "ERROR"}
        stop_clis, stop_watcher = threading.Event(), threading.Event()  # the CLIs stop first
        self.cli_loops = [
            CliSweeperLoop(
                name,
                self._seed(),
                TQ_GC,
                self.workdir,
                CliLoopSettings(self.config_path, env, s.cli_pause_s, kill_chance, s.kill_after_s),
                self.tally,
                self.switches.chaos,
                stop_clis,
                self.switches.errors,
            )
            for name, kill_chance in (("cli-a", 0.0), ("cli-b", s.kill_chance))
        ]
        self.watcher = SidecarWatcher(
            self.sidecar, self.tally, s.interval_s, stop_watcher, self.workdir / "sidecar.jsonl"
        )
        for loop in self.cli_loops:
            stack.callback(loop.close)
            loop.start()
        stack.callback(self.watcher.join, 60)
        stack.callback(stop_watcher.set)
        self.watcher.start()

    def _join(self, threads: list[threading.Thread]) -> None:
        self.switches.stop.set()
        for thread in threads:
            thread.join(timeout=60)

    def _seed(self) -> int:
        return self._rng.randrange(2**32)

    def _sleep_or_fail(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.switches.errors:
                raise SoakBroken(self.switches.errors)
            time.sleep(min(left, 1.0))

    def _end_chaos(self) -> None:
        self.switches.chaos.clear()  # no more moves, leaks, kills or restarts; references kept
        self.tally.end_chaos(time.time())
        self.redis_chaos.join(timeout=60)  # a restart in progress ends first
        # The CLI loops end with the chaos (their runs in progress finish): a CLI sweep holds the lease
        # while it joins Ray, seconds on a loaded 2-core box, longer than this soak's grace, so two of
        # them in a row would keep restarting every orphan's clock. The sidecar sweeps on alone.
        for loop in self.cli_loops:
            loop.close(finish_within_s=CLI_TIMEOUT_S)

    def _settle(self) -> None:
        s = self.settings
        started = time.monotonic()
        self._sleep_or_fail(s.settle_s)
        last_orphan_unix = self.truth.unix(min(self.truth.last_orphaned_s(), self.truth.now_s()))
        seen_by_unix = last_orphan_unix + s.index_range_reuse_s  # the sidecar's index ranges renewed since
        while not self.tally.had_their_chance(seen_by_unix, s.grace_s):
            if time.monotonic() - started > s.settle_at_most_s:
                log.warning("sweeps had no chance at every orphan within %.0f s", s.settle_at_most_s)
                break
            self._sleep_or_fail(0.5)
        log.info("chaos off: sweeps ran for %.0f s more", time.monotonic() - started)

    # -- the verdict ----------------------------------------------------------------------------------

    def _verdict(self) -> Verdict:
        self.checker.check("final check")
        now_s = self.truth.now_s()
        present = self.tq.keys(STAGING)
        overdue = sorted(self.truth.orphans_since(now_s - self.settings.overdue_s) & present)
        orphans = self.truth.orphans_since(float("inf"))
        self.watcher.poll()
        verdict = Verdict(
            self.settings,
            self.truth.violations(),
            overdue,
            len(orphans - present),
            self.tally,
            list(self.switches.errors),
        )
        verdict.details = self._details(verdict)
        return verdict

    def _details(self, verdict: Verdict) -> dict[str, Any]:
        tally = self.tally
        return {
            "namespace": self.namespace,
            "rows": dict(self.truth.counts()),
            "moves": dict(self.truth.moves),
            "publishers": dict(sum((Counter(p.stats) for p in self.publishers), Counter())),
            "leaker": self.leaker.stats,
            "redis_restarts": self.restarts.count,
            "cli_runs": {loop.name: loop.runs for loop in self.cli_loops},
            "cli_kills": {loop.name: loop.kills for loop in self.cli_loops},
            "sweeps_by_sweeper": {f"{w}:{o}": n for (w, o), n in sorted(tally.by_sweeper.items())},
            "rows_deleted_by_sweeper": dict(tally.deleted),
            "reasons": dict(tally.reasons.most_common(12)),
            "checks": self.checker.checks,
            "sidecar_polls": {"failed": self.watcher.polls_failed, "maybe_missed": self.watcher.maybe_missed},
            "violations_by_last_move": dict(Counter(v.last_move for v in verdict.violations)),
            "violations": [v.to_dict() for v in verdict.violations],
            "overdue_orphans": verdict.overdue[:OVERDUE_SHOWN],
            "load_average": os.getloadavg(),
            "errors": verdict.errors,
        }


class SoakBroken(RuntimeError):
    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__)
    parser.add_argument("--minutes", type=float, required=True, help="how long the chaos lasts")
    parser.add_argument("--seed", type=int, default=None, help="seeds every random choice (default: random)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, manifests)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.seed is None:
        args.seed = random.randrange(10**6)
    return args


@contextlib.contextmanager
def terminated_cleanly(errors: list[str]) -> Iterator[None]:
    """SIGTERM and Ctrl-C end the soak at its next check (within a second once the chaos is on), which
    unwinds like any failure and stops every process the soak started. Not at once: an interrupt raised
    inside a Ray call can abort the process in Ray's core worker and leave its Ray head and Redis
    running."""

    def note(signum: int, frame: FrameType | None) -> None:
        errors.append(f"interrupted ({signal.Signals(signum).name})")

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    settings = SoakSettings(minutes=args.minutes, seed=args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="tqgc-soak-"))
    log.info("seed %d, work directory %s", settings.seed, workdir)
    soak = Soak(settings, workdir)
    try:
        with terminated_cleanly(soak.switches.errors):
            verdict = soak.run()
    except SoakBroken as exc:
        print(f"soak: broken, no verdict: {exc}")
        return 2
    except Exception as exc:  # the soak could not run (a refused config, Ray not starting): no verdict
        log.exception("the soak itself failed")
        print(f"soak: broken, no verdict: {type(exc).__name__}: {exc}".splitlines()[0])
        return 2
    details_path = workdir / "soak-details.json"
    details_path.write_text(json.dumps(verdict.details, indent=2, default=str))
    for name in (
        "rows",
        "moves",
        "publishers",
        "leaker",
        "redis_restarts",
        "cli_kills",
        "sweeps_by_sweeper",
        "rows_deleted_by_sweeper",
        "reasons",
        "violations_by_last_move",
        "load_average",
    ):
        log.info("%s: %s", name, verdict.details[name])
    if verdict.passed and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        log.info("details (every violation with its row's history): %s", details_path)
    print(verdict.line(), flush=True)
    return 0 if verdict.passed else 1
