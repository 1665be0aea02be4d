"""Publishers the store refuses mid-run: one publisher connects as an ACL user whose rights are taken away
for a few seconds at random moments (and who is gone after each Redis restart until made again), while
the sweepers go on. The publisher is told at once (StoreRefused, as the trainer kit raises it): it gives
up each admission whose renewal was refused, so that the ground truth never claims a row the store no
longer protects."""

from __future__ import annotations

import logging
import random
import threading
from urllib.parse import urlsplit

import redis

from .actor_controls import ActorSwitches
from .chaos import sleep_through_chaos

log = logging.getLogger("soak")

USER = "soak-refused"
PASSWORD = "soak-refused-pw"


def refused_user_url(admin_url: str) -> str:
    """The state URL the refused publisher connects with."""
    parts = urlsplit(admin_url)
    return f"redis://{USER}:{PASSWORD}@{parts.hostname}:{parts.port}/0"


class Refusals(threading.Thread):
    """Keeps the ACL user allowed (made again after every Redis restart), and refuses it everything for
    `window_s` every `every_s` (ranges)."""

    def __init__(
        self,
        admin_url: str,
        seed: int,
        every_s: tuple[float, float],
        window_s: tuple[float, float],
        switches: ActorSwitches,
    ) -> None:
        super().__init__(name="refusals", daemon=True)
        self._admin_url, self._switches = admin_url, switches
        self._every_s, self._window_s = every_s, window_s
        self._rng = random.Random(seed)
        self.count = 0

    def run(self) -> None:
        try:
            admin = redis.Redis.from_url(self._admin_url, socket_timeout=5, socket_connect_timeout=5)
            try:
                self._refuse_now_and_then(admin)
            finally:
                admin.close()
        except Exception as exc:
            log.exception("refusals crashed")
            self._switches.errors.append(f"refusals: {type(exc).__name__}: {exc}")

    def _refuse_now_and_then(self, admin: redis.Redis) -> None:
        next_refusal_s = self._rng.uniform(*self._every_s)
        while sleep_through_chaos(self._switches, 0.5):
            next_refusal_s -= 0.5
            if next_refusal_s > 0:
                self._set_user(admin, "+@all")  # again after a Redis restart empty
                continue
            self.count += 1
            log.info("publisher refused (#%d)", self.count)
            self._set_user(admin, "-@all")
            sleep_through_chaos(self._switches, self._rng.uniform(*self._window_s))
            next_refusal_s = self._rng.uniform(*self._every_s)
        self._set_user(admin, "+@all")

    @staticmethod
    def _set_user(admin: redis.Redis, rights: str) -> None:
        try:
            admin.acl_setuser(
                USER, enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], channels=["*"], commands=[rights]
            )
        except redis.RedisError as exc:  # Redis restarting: the next round makes the user again
            log.debug("ACL SETUSER failed: %s", exc)
