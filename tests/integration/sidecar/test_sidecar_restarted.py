"""A memory:// sidecar killed and started again: its registry comes back empty. Clients made before find
the new actor by name and admit again what they hold, and the new sidecar deletes nothing for a grace
after its start (its first-seen records started empty with it), so a block running across the restart
keeps its rows, and later blocks of the old client are protected."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import ray
from harness import keys_in

from tq_gc.publish.client import GcClient
from tq_gc.publish.holders import by_public_name
from tq_gc.sidecar.client import sidecar_registry
from tq_gc.sidecar.names import SIDECAR_RAY_NAMESPACE

from .helpers import MakeConfig, StartSidecar, call, name_of, reports, wait_until

pytestmark = pytest.mark.ray

TTL_S = 6.0  # renewed every 2 s (a third of the grace)
GRACE_S = 6.0  # six renewals: a busy 2-core machine may hold one up for a few seconds


def admitted(handle: Any) -> set[str]:
    """The admission ids the sidecar holds, as their publishers gave them."""
    return set(by_public_name(call(handle, "live_admissions")))


def _gone(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


def test_a_block_across_a_sidecar_restart_keeps_its_rows_and_later_blocks_are_protected(
    make_config: MakeConfig, sidecar: StartSidecar, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ["across", "orphan-1"])
    config = make_config(grace_seconds=GRACE_S)  # memory://
    name, namespace = f"tq-gc-test-{uuid.uuid4().hex[:8]}", SIDECAR_RAY_NAMESPACE
    first = sidecar(config, name=name)
    registry = sidecar_registry(name=name, namespace=namespace)  # made before the restart
    with GcClient(registry, ttl_seconds=TTL_S) as gc:
        with gc.holding("across", {tq_partition: ["across"]}):
            wait_until("a sweep of the first sidecar", lambda: reports(first))
            ray.kill(first, no_restart=True)
            wait_until("the killed sidecar is gone", lambda: _gone(name, namespace))
            second = sidecar(config, name=name)  # started again under its name, as a user (or Ray) would
            wait_until("the block is admitted again", lambda: "across" in admitted(second))
            wait_until(
                "the new sidecar reclaimed an orphan", lambda: "orphan-1" not in keys_in(tq, tq_partition), 60
            )
            assert "across" in keys_in(tq, tq_partition)
        with gc.holding("later", {tq_partition: ["later"]}):
            assert "later" in admitted(second)  # the old client writes to the new sidecar
            put_rows(tq_partition, ["later", "orphan-2"])
            wait_until("another orphan reclaimed", lambda: "orphan-2" not in keys_in(tq, tq_partition), 60)
            assert "later" in keys_in(tq, tq_partition)


def test_a_client_of_a_sidecar_renews_within_a_third_of_its_grace(
    make_config: MakeConfig, sidecar: StartSidecar
) -> None:
    """The client knows the sidecar's grace: the default period is shortened to a third of it, and a
    longer one asked for is refused (an admission a restarted sidecar lost would come back too late)."""
    config = make_config(grace_seconds=GRACE_S)
    handle = sidecar(config)
    registry = sidecar_registry(name=name_of(handle), namespace=SIDECAR_RAY_NAMESPACE)
    with pytest.raises(ValueError, match="third of the sweepers' grace"):
        GcClient(registry, ttl_seconds=60, renew_seconds=GRACE_S / 2)
    with GcClient(registry, ttl_seconds=60) as gc:  # by default min(60 / 3, 10) = 10 s: too long here
        assert gc.renew_seconds == pytest.approx(GRACE_S / 3)
