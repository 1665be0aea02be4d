"""An embedder's plain `Collector` holds the TransferQueue's claim, as the CLI and the sidecar do.

Two trainers each embed a Collector, each with a state store of its own (two redis-servers), beside one
real TQ: each reads as the other holding nothing, so only one may sweep. The other's sweeps are skipped
(cause tq_claimed, the CLI's exit 3) with nothing deleted, until the first one closes its row store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from harness import keys_in

from tools.testbed.redis_server import RedisServer
from tq_gc.cli.commands import EXIT_SKIPPED, OUTCOME_EXIT
from tq_gc.config import Config, parse_config
from tq_gc.report import Cause, Outcome
from tq_gc.state import RedisState
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.sweep import Collector

pytestmark = pytest.mark.ray


@pytest.fixture
def second_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def embedder_config(ray_address: str, state_url: str, partition: str) -> Config:
    return parse_config(
        {
            "namespace": "embedded",
            "state_url": state_url,
            "transfer_queue": {"ray_address": ray_address},
            "scope": [{"partition": partition, "all_keys": True}],
            "grace_seconds": 3600,
            "limits": {"max_delete_fraction": 1.0},
        }
    )


def test_a_second_embedder_of_another_state_store_is_skipped_with_tq_claimed(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    redis_url: str,
    second_redis: RedisServer,
) -> None:
    put_rows(tq_partition, ["held/1"])
    first_config = embedder_config(ray_cluster.address, redis_url, tq_partition)
    second_config = embedder_config(ray_cluster.address, second_redis.url, tq_partition)
    first_state = RedisState.from_url(first_config.state_url, first_config.namespace)
    second_state = RedisState.from_url(second_config.state_url, second_config.namespace)
    try:
        with TransferQueueRowStore.attach(first_config.transfer_queue) as first_rows:
            first = Collector(first_config, first_state, first_rows, holder="trainer-a")
            assert first.sweep(dry_run=False).outcome == Outcome.COMPLETED
            with TransferQueueRowStore.attach(second_config.transfer_queue) as second_rows:
                second = Collector(second_config, second_state, second_rows, holder="trainer-b")
                for dry_run in (False, True):
                    report = second.sweep(dry_run=dry_run)
                    assert (report.outcome, report.cause) == (Outcome.SKIPPED, Cause.TQ_CLAIMED), report
                    assert OUTCOME_EXIT[report.outcome] == EXIT_SKIPPED
                    assert "trainer-a" in report.reason and report.counts.deleted == 0
                assert first.sweep(dry_run=False).outcome == Outcome.COMPLETED, "the first goes on"
        # The first embedder's row store closed: its claim ended with it.
        with TransferQueueRowStore.attach(second_config.transfer_queue) as second_rows:
            again = Collector(second_config, second_state, second_rows, holder="trainer-b")
            report = again.sweep(dry_run=False)
            assert report.outcome == Outcome.COMPLETED, report
    finally:
        first_state.close()
        second_state.close()
    assert keys_in(tq, tq_partition) == {"held/1"}
