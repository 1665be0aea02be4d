"""The chaos beside the sweepers' own: Redis restarted at random moments, empty or with its data (its
append-only file: the lease and the barrier survive while publishers could not admit), and the job's
checkpoints (the only windows in which fenced manifests change)."""

from __future__ import annotations

import logging
import random
import threading
import time

from tools.testbed.redis_server import KillableRedisServer

from .actor_controls import ActorSwitches, RedisRestarts

log = logging.getLogger("soak")


class RedisChaos(threading.Thread):
    """Restarts Redis (SHUTDOWN NOSAVE, start again on the same port) at random moments: every other one
    on average empty (its append-only file removed), the others with their data."""

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
                with_data = self._rng.random() < 0.5
                if with_data:
                    self._redis.restart_with_data()
                else:
                    self._redis.restart_empty()
                log.info(
                    "Redis restarted %s (#%d, down %.2f s)",
                    "with its data" if with_data else "empty",
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
