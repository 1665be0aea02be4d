"""The soak's driver: starts Redis, Ray, the job's TQ and the sidecar, writes the anchors, runs the
actors and sweepers through the chaos, lets the sweeps settle, and collects the verdict."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tools.testbed.cli import cli_env
from tools.testbed.ray_head import RAY_TEST_ENV, TQ_TEST_CONF, RayHead
from tools.testbed.redis_server import KillableRedisServer
from tools.testbed.tuned_cli import row_store_factory, tuned_cli_command
from tq_gc import AdmissionRegistry, load_config
from tq_gc.sidecar.client import start_sidecar

from .actor_controls import ActorSwitches, RedisRestarts, Timing
from .chaos import Checkpoints, RedisChaos
from .checker import Checker
from .interrupts import terminated_cleanly
from .job_tq import CANONICAL, ROUTE_PLAN_KEY_PATH, STAGING, JobTq, route_plan_tags
from .journal_checks import read_journal_checks
from .leaker import Leaker
from .manifest_files import write_manifest
from .publisher import Publisher
from .refusals import Refusals, refused_user_url
from .settings import SoakSettings
from .sweepers import CLI_TIMEOUT_S, CliLoopSettings, CliSweeperLoop, SidecarWatcher, SweepTally
from .truth import MANIFEST, TAG, GroundTruth, Holder
from .verdict import Verdict

log = logging.getLogger("soak")

ANCHOR_TAGGED = "anchor/tagged"
PUT_BATCH = 2000
OVERDUE_SHOWN = 20


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

        self.redis = KillableRedisServer(appendonly=True)  # RedisChaos restarts it with its data, or empty
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
        # The sidecar's lease is the fixed 60 s; its delete batches the soak's (the CLIs' both, tuned_cli).
        self.sidecar = start_sidecar(
            load_config(self.config_path),
            row_store_factory(self.settings.batch, self._journal_checks_to("sidecar")),
        )
        stack.callback(self._stop_sidecar)
        log.info("TQ and sidecar up")

    def _write_config(self, ray_address: str) -> Path:
        s = self.settings
        self.manifest_dir = self.workdir / "ckpt"
        config = {
            "namespace": f"soak-{s.seed}-{uuid.uuid4().hex[:6]}",
            "state_url": self.redis.url,
            "transfer_queue": {"ray_address": ray_address},
            "scope": [{"partition": STAGING, "all_keys": True}],
            "grace_seconds": s.grace_s,
            "allow_short_grace": True,
            "manifests": [{"glob": f"{self.manifest_dir}/**/gc-manifest.json"}],
            "tag_references": [
                {"partition": CANONICAL, "key_path": ROUTE_PLAN_KEY_PATH, "target_partition": STAGING}
            ],
            "limits": {"max_delete_fraction": 1.0},
            "schedule": {"interval_seconds": s.interval_s},
        }
        self.namespace = str(config["namespace"])
        path = self.workdir / "tq-gc.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _journal_checks_to(self, sweeper: str) -> str | None:
        """Where `sweeper` appends its journal checks, if it lists by the change journal."""
        if sweeper not in self.settings.journal_sweepers:
            return None
        return str(self.workdir / f"journal-checks-{sweeper}.jsonl")

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

    def _registry(self, stack: contextlib.ExitStack, url: str | None = None) -> AdmissionRegistry:
        registry = AdmissionRegistry.connect(url or self.redis.url, namespace=self.namespace)
        stack.callback(registry.close)
        return registry

    def _start_actors(self, stack: contextlib.ExitStack) -> None:
        s = self.settings
        timing = Timing(s.admission_ttl_seconds, s.renew_every_s, s.fence_ttl_s, s.tick_s)
        paces = [s.calm] * s.calm_publishers + [s.hot] * s.hot_publishers + [s.hopping] * s.hopping_publishers
        paces += [s.calm] * s.refused_publishers  # the last ones: connected as the ACL user refused at times
        refused_from = len(paces) - s.refused_publishers
        refused_url = refused_user_url(self.redis.url)
        self.publishers = [
            Publisher(
                n,
                self._seed(),
                self.tq,
                self._registry(stack, refused_url if n >= refused_from else None),
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
        self.refusals = Refusals(
            self.redis.url, self._seed(), s.refusal_every_s, s.refusal_window_s, self.switches
        )
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
            self.refusals,
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
                tuned_cli_command(s.batch, s.lease_ttl_s, self._journal_checks_to(name)),
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
        journal_checks = {
            sweeper: Path(path)
            for sweeper in self.settings.journal_sweepers
            if (path := self._journal_checks_to(sweeper)) is not None
        }
        verdict = Verdict(
            self.settings,
            self.truth.violations(),
            overdue,
            len(orphans - present),
            self.tally,
            list(self.switches.errors),
            read_journal_checks(journal_checks),
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
            "publisher_refusals": self.refusals.count,
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
            "journal": verdict.journal.to_dict(),
            "journal_differences": verdict.journal.differences,
            "load_average": os.getloadavg(),
            "errors": verdict.errors,
        }


class SoakBroken(RuntimeError):
    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors))
