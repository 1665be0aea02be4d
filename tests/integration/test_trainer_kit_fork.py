"""A GcClient made before os.fork(): the child has a renewer of its own (threads do not survive a fork),
on a real Redis and a real fork."""

from __future__ import annotations

import multiprocessing
import sys
import time

from tq_gc.publish.client import GcClient
from tq_gc.publish.registry import AdmissionRegistry

from support.world import STAGING

TTL_S = 1.5  # renewed every half second
CHILD_EXIT_S = 120.0


def _hold_past_the_ttl(gc: GcClient, redis_url: str) -> None:
    """In the forked child: hold a block for three TTLs, and exit 0 only if it stayed admitted throughout."""
    reader = AdmissionRegistry.connect(redis_url, "job")
    admitted_throughout = True
    with gc.holding("child-call", {STAGING: ["child-row"]}):
        until = time.monotonic() + 3 * TTL_S
        while time.monotonic() < until:
            admitted_throughout = admitted_throughout and "child-call" in reader.live()
            time.sleep(0.05)
    released = "child-call" not in reader.live()
    gc.close()
    reader.close()
    sys.exit(0 if admitted_throughout and released else 3)


def test_a_client_made_before_a_fork_renews_the_childs_blocks(redis_url: str) -> None:
    fork = multiprocessing.get_context("fork")
    reader = AdmissionRegistry.connect(redis_url, "job")
    with GcClient.connect(redis_url, "job", ttl_seconds=TTL_S) as gc:
        with gc.holding("parent-call", {STAGING: ["parent-row"]}):  # its connection and renewer are up
            child = fork.Process(target=_hold_past_the_ttl, args=(gc, redis_url))
            child.start()
            child.join(CHILD_EXIT_S)
            assert child.exitcode == 0, "the child's block lapsed: no renewer in the child"
            assert "parent-call" in reader.live(), "the child released or dropped the parent's block"
        with gc.holding("parent-again", {STAGING: ["parent-row"]}):  # the parent's client still works
            assert "parent-again" in reader.live()
    reader.close()
