"""TransferQueueRowStore on a real TQ: what it reads, what it deletes, and that it never creates or
kills a TQ, from this process, from a subprocess, and against a cluster without TQ."""

from __future__ import annotations

import json
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tools.testbed.tuned_cli import JOB_NEVER_IDLE_MS
from tq_gc.config import TransferQueueConfig
from tq_gc.errors import ConfigError, Interrupted, StoreUnavailable
from tq_gc.rows import Identity, tags_digest
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.attach import find_controller, open_client
from tq_gc.stores.transferqueue.index_range import IndexPaging
from tq_gc.stores.transferqueue.key_windows import KeyWindows
from tq_gc.stores.transferqueue.pacing import FixedPacing

from support.ray_fixtures import fresh_partition, reusable_indexes

pytestmark = pytest.mark.ray

PutRows = Callable[..., None]
RunPython = Callable[..., Any]
RecordTiming = Callable[[str, float], None]

# Requests of 4 keys at most: a few rows make several windows.
BATCH_4 = FixedPacing(batch=4)


@pytest.fixture
def store(ray_cluster: Any, tq: Any) -> Iterator[TransferQueueRowStore]:
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as attached:
        yield attached


@pytest.fixture
def small_batch_store(ray_cluster: Any, tq: Any) -> Iterator[TransferQueueRowStore]:
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with TransferQueueRowStore.attach(config, fixed=FixedPacing(batch=7)) as attached:
        yield attached


def truth(tq: Any, partition: str, key: str) -> Identity | None:
    """One key per request: TQ's own answer, with no ambiguity about which index is whose."""
    meta = tq.get_client().kv_retrieve_meta([key], partition, create=False)
    if meta.size == 0:
        return None
    return Identity(tags_digest(meta.custom_meta[0]), meta.global_indexes[0])


def test_list_rows_returns_keys_and_tags(
    store: TransferQueueRowStore, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, ["a", "b"], [{"rollout_id": "r1", "n": 1}, {"rollout_id": "r2"}])
    put_rows(tq_partition, ["untagged"])
    put_rows(tq_partition, ["ghost"], {"rollout_id": "r3"}, data=False)  # keys with tags, no data

    assert store.list_rows(tq_partition) == {
        "a": {"rollout_id": "r1", "n": 1},
        "b": {"rollout_id": "r2"},
        "untagged": {},
        "ghost": {"rollout_id": "r3"},
    }
    assert tq_partition in store.partitions()


def test_identities_give_global_index_and_tags_digest(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, ["a", "b", "c"], [{"t": 1}, {"t": 2}, {}])

    found = store.identities(tq_partition, ["c", "a", "b"])

    assert found == {key: truth(tq, tq_partition, key) for key in ["a", "b", "c"]}
    assert found["a"].tags_digest == tags_digest({"t": 1})
    assert found["c"].tags_digest == tags_digest(None)
    assert len({identity.global_index for identity in found.values()}) == 3


def test_identities_drop_unknown_keys_and_never_create_any(
    small_batch_store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    keys = [f"k{i:02d}" for i in range(50)]
    put_rows(tq_partition, keys, [{"i": i} for i in range(50)])
    tq.kv_clear(keys[::3], tq_partition)  # gaps inside every batch of 7
    asked = [f"unknown{i}" for i in range(10)] + keys  # and a batch made only of unknown keys
    before = tq.kv_list(tq_partition)

    found = small_batch_store.identities(tq_partition, asked)

    expected = {key: truth(tq, tq_partition, key) for key in keys if key not in keys[::3]}
    assert found == expected
    assert tq.kv_list(tq_partition) == before
    assert small_batch_store.identities("tqgc-test-no-such-partition", keys) == {}
    assert "tqgc-test-no-such-partition" not in small_batch_store.partitions()


def test_a_key_rewritten_with_other_tags_gets_another_identity(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, ["a"], {"attempt": 1})
    first = store.identities(tq_partition, ["a"])["a"]

    put_rows(tq_partition, ["a"], {"attempt": 2})  # overwrite in place: same index, new tags
    overwritten = store.identities(tq_partition, ["a"])["a"]
    tq.kv_clear(["a"], tq_partition)
    put_rows(tq_partition, ["a"], {"attempt": 3})  # delete and re-put
    recreated = store.identities(tq_partition, ["a"])["a"]

    assert not overwritten.matches(first)
    assert not recreated.matches(overwritten)


def test_a_key_deleted_and_reput_with_the_same_tags_can_get_back_the_same_identity(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    """TQ hands out freed global indexes again first in, first out, across all partitions: a key
    cleared and written again with the same tags, once the indexes freed before it are used up, gets
    its old index back. Identity (global index + tags digest) cannot tell these two rows apart; this
    test pins that fact."""
    put_rows(tq_partition, ["a"], {"rollout_id": "r1"})
    before = store.identities(tq_partition, ["a"])["a"]
    freed_before = reusable_indexes(tq)
    tq.kv_clear(["a"], tq_partition)
    # use up the indexes freed before "a"'s (by earlier tests), then write "a" again
    put_rows(tq_partition, [*(f"filler{i}" for i in range(freed_before)), "a"], data=False)
    put_rows(tq_partition, ["a"], {"rollout_id": "r1"})

    assert store.identities(tq_partition, ["a"])["a"] == before


def test_delete_if_unchanged_keeps_a_row_recreated_under_a_new_index(
    small_batch_store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    keys = [f"k{i:02d}" for i in range(50)]
    put_rows(tq_partition, keys, {"rollout_id": "r1"})
    expected = small_batch_store.identities(tq_partition, keys)
    recreated, retagged, gone = keys[0:50:5], keys[1:50:5], keys[2:50:5]
    tq.kv_clear(recreated, tq_partition)
    # every freed index (theirs included) goes to fillers, so the recreated keys get fresh ones
    put_rows(tq_partition, [f"filler{i}" for i in range(reusable_indexes(tq))], data=False)
    put_rows(tq_partition, recreated, {"rollout_id": "r1"})
    put_rows(tq_partition, retagged, {"rollout_id": "r2"})
    tq.kv_clear(gone, tq_partition)
    now = small_batch_store.identities(tq_partition, recreated)
    assert all(now[key].global_index != expected[key].global_index for key in recreated)

    deleted = small_batch_store.delete_if_unchanged(tq_partition, expected)

    unchanged = set(keys) - set(recreated) - set(retagged) - set(gone)
    assert deleted == unchanged
    assert set(small_batch_store.list_rows(tq_partition)) & set(keys) == set(recreated) | set(retagged)


def test_delete_in_batches_removes_exactly_those_keys_and_is_idempotent(
    small_batch_store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    keys = [f"k{i:02d}" for i in range(60)]
    put_rows(tq_partition, keys, {"rollout_id": "r1"})
    doomed, kept = keys[:50], keys[50:]

    small_batch_store.delete(tq_partition, doomed)

    assert set(tq.kv_list(tq_partition)[tq_partition]) == set(kept)
    small_batch_store.delete(tq_partition, [*doomed, "never-existed"])  # again, plus an unknown key
    assert set(small_batch_store.list_rows(tq_partition)) == set(kept)
    assert small_batch_store.identities(tq_partition, doomed) == {}


def test_unknown_partition_lists_empty_and_is_not_created(store: TransferQueueRowStore) -> None:
    partition = "tqgc-test-never-written"

    assert store.list_rows(partition) == {}
    assert store.identities(partition, ["a"]) == {}
    store.delete(partition, ["a"])
    assert partition not in store.partitions()


def test_attach_in_a_process_already_on_ray_leaves_ray_and_tq_up(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows, record_timing: RecordTiming
) -> None:
    import ray

    put_rows(tq_partition, ["a"])
    started = time.monotonic()
    store = TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address))
    record_timing("attach in pytest (Ray already connected)", time.monotonic() - started)
    assert set(store.list_rows(tq_partition)) == {"a"}
    store.close()
    store.close()  # idempotent

    assert ray.is_initialized()
    assert set(tq.kv_list(tq_partition)[tq_partition]) == {"a"}  # the job's own client still works
    with pytest.raises(StoreUnavailable, match="closed"):
        store.list_rows(tq_partition)


def test_attach_from_a_subprocess_and_exit_leaves_the_controller_alive(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: PutRows,
    run_python: RunPython,
    record_timing: RecordTiming,
) -> None:
    import ray

    put_rows(tq_partition, ["a", "b"], {"rollout_id": "r1"})
    code = textwrap.dedent(f"""
        import json, os, time
        t0 = time.monotonic()
        from tq_gc.config import TransferQueueConfig
        from tq_gc.stores.transferqueue import TransferQueueRowStore
        config = TransferQueueConfig(ray_address={ray_cluster.address!r})
        t1 = time.monotonic()
        store = TransferQueueRowStore.attach(config)
        t2 = time.monotonic()
        rows = store.list_rows({tq_partition!r})
        store.close()
        again = TransferQueueRowStore.attach(config)   # and leave without close(): a crash
        print(json.dumps({{"rows": rows, "import_s": t1 - t0, "attach_s": t2 - t1,
                           "again": sorted(again.list_rows({tq_partition!r}))}}))
        os._exit(0)
    """)
    started = time.monotonic()
    result = run_python(code)
    record_timing("subprocess: python start + import + attach + list", time.monotonic() - started)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    record_timing("subprocess: import tq_gc.stores.transferqueue", report["import_s"])
    record_timing("subprocess: attach (ray.init + controller + client)", report["attach_s"])

    assert report["rows"] == {"a": {"rollout_id": "r1"}, "b": {"rollout_id": "r1"}}
    assert report["again"] == ["a", "b"]
    controller = ray.get_actor("TransferQueueController", namespace="transfer_queue")
    assert ray.get(controller.get_config.remote(), timeout=30) is not None
    assert set(tq.kv_list(tq_partition)[tq_partition]) == {"a", "b"}


def test_cluster_without_tq_raises_not_found_and_creates_none(
    bare_ray_cluster: Any, run_python: RunPython
) -> None:
    code = textwrap.dedent(f"""
        import json, ray
        from tq_gc.config import TransferQueueConfig
        from tq_gc.errors import TransferQueueNotFound
        from tq_gc.stores.transferqueue import TransferQueueRowStore
        try:
            TransferQueueRowStore.attach(TransferQueueConfig(ray_address={bare_ray_cluster.address!r}))
            outcome = "attached"
        except TransferQueueNotFound as exc:
            outcome = str(exc)
        connected_after = ray.is_initialized()
        ray.init(address={bare_ray_cluster.address!r}, log_to_driver=False, logging_level="WARNING")
        actors = ray.util.list_named_actors(all_namespaces=True)
        print(json.dumps({{"outcome": outcome, "connected_after": connected_after, "actors": actors}}))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert "no TransferQueueController" in report["outcome"]
    assert bare_ray_cluster.address in report["outcome"]
    assert report["connected_after"] is False  # attach() disconnected the Ray connection it opened
    assert report["actors"] == []  # nothing created: no controller, no storage unit


def test_unreachable_cluster_is_a_config_error_at_once(run_python: RunPython) -> None:
    code = textwrap.dedent("""
        import socket, time
        from tq_gc.config import TransferQueueConfig
        from tq_gc.errors import ConfigError
        from tq_gc.stores.transferqueue import TransferQueueRowStore
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]   # nothing listens there once closed
        started = time.monotonic()
        try:
            TransferQueueRowStore.attach(TransferQueueConfig(ray_address=f"127.0.0.1:{port}"))
        except ConfigError as exc:
            print(f"{time.monotonic() - started:.3f}", exc)
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    seconds, message = result.stdout.strip().split(" ", 1)
    assert float(seconds) < 10
    assert "cannot reach a Ray cluster" in message and "ray_address" in message


@pytest.mark.parametrize("address", ["", "local", "  local "])
def test_an_address_that_would_start_a_new_cluster_is_refused(address: str) -> None:
    with pytest.raises(ConfigError, match="would start a new Ray cluster"):
        TransferQueueRowStore.attach(TransferQueueConfig(ray_address=address))


def test_tq_failures_become_store_unavailable(
    ray_cluster: Any, tq: Any, store: TransferQueueRowStore, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, ["a"])
    with pytest.raises(StoreUnavailable, match="failed"):
        store.identities(tq_partition, [123])  # type: ignore[list-item]  # TQ refuses non-str keys
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    impatient = TransferQueueRowStore.attach(config, request_timeout_seconds=1e-6)
    with impatient, pytest.raises(StoreUnavailable, match="no answer within"):
        impatient.list_rows(tq_partition)
    assert set(store.list_rows(tq_partition)) == {"a"}


def test_ten_thousand_keys(
    store: TransferQueueRowStore, tq: Any, tq_partition: str, put_rows: PutRows, record_timing: RecordTiming
) -> None:
    keys = [f"__generation_cut__/ckpt-1/r{i}_g0_a1/call0/{i}" for i in range(10_000)]
    started = time.monotonic()
    put_rows(tq_partition, keys, [{"rollout_id": f"r{i}"} for i in range(10_000)])
    record_timing("10k keys: kv_batch_put (2k batches, test helper)", time.monotonic() - started)

    timings = {}
    started = time.monotonic()
    rows = store.list_rows(tq_partition)
    timings["list_rows"] = time.monotonic() - started
    started = time.monotonic()
    found = store.identities(tq_partition, keys)
    timings["identities"] = time.monotonic() - started
    started = time.monotonic()
    found_with_gaps = store.identities(
        tq_partition, [k + "-missing" if i % 100 == 0 else k for i, k in enumerate(keys)]
    )
    timings["identities, 1% unknown"] = time.monotonic() - started
    started = time.monotonic()
    deleted = store.delete_if_unchanged(tq_partition, found)
    timings["delete_if_unchanged (all match)"] = time.monotonic() - started
    assert store.list_rows(tq_partition) == {}
    put_rows(tq_partition, keys)
    started = time.monotonic()
    store.delete(tq_partition, keys)
    timings["delete (unconditional)"] = time.monotonic() - started
    for name, seconds in timings.items():
        record_timing(f"10k keys: {name}", seconds)

    assert len(rows) == len(found) == len(deleted) == 10_000
    assert len(found_with_gaps) == 9_900
    assert store.list_rows(tq_partition) == {}
    assert all(seconds < 20 for seconds in timings.values()), timings


# ---- the listing: short requests, the same answer as kv_list ----------------------------------------


@pytest.fixture
def other_partition(tq: Any) -> Iterator[str]:
    """A second fresh partition, so that two partitions' global indexes interleave (one shared pool)."""
    with fresh_partition(tq, "tqgc-other") as partition:
        yield partition


def windowed_store(ray_cluster: Any, request_batch: int) -> TransferQueueRowStore:
    """Without waits for quiet moments: a small partition's indexes come in one copy then."""
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    return TransferQueueRowStore.attach(config, fixed=FixedPacing(batch=request_batch, quiet_ms=0))


def test_list_rows_in_windows_is_exactly_kv_list(
    ray_cluster: Any, tq: Any, tq_partition: str, other_partition: str, put_rows: PutRows
) -> None:
    for round_ in range(6):  # the two partitions' indexes interleave in runs of 7 and 5
        put_rows(
            tq_partition, [f"a{round_}-{i}" for i in range(7)], [{"r": round_, "i": i} for i in range(7)]
        )
        put_rows(other_partition, [f"b{round_}-{i}" for i in range(5)], {"other": True})
    tq.kv_clear([f"a1-{i}" for i in range(7)] + ["a4-3"], tq_partition)
    tq.kv_clear([f"b2-{i}" for i in range(5)], other_partition)
    put_rows(tq_partition, [f"late-{i}" for i in range(9)], [{"late": i} for i in range(9)])  # reused indexes
    put_rows(tq_partition, ["untagged"])
    put_rows(tq_partition, ["ghost"], {"rollout_id": "r3"}, data=False)

    with windowed_store(ray_cluster, request_batch=4) as store:
        listed = store.list_rows(tq_partition)

    assert listed == tq.kv_list(tq_partition)[tq_partition]
    assert len(listed) == 6 * 7 - 8 + 9 + 2


def test_list_keys_in_windows_gives_every_key_with_its_global_index_and_reads_no_tags(
    ray_cluster: Any, tq: Any, tq_partition: str, other_partition: str, put_rows: PutRows
) -> None:
    for round_ in range(4):  # the two partitions' indexes interleave
        put_rows(tq_partition, [f"a{round_}-{i}" for i in range(7)], {"r": round_})
        put_rows(other_partition, [f"b{round_}-{i}" for i in range(5)], {"other": True})
    tq.kv_clear([f"a1-{i}" for i in range(7)], tq_partition)
    put_rows(tq_partition, [f"late-{i}" for i in range(9)])  # reused indexes
    put_rows(tq_partition, ["ghost"], {"rollout_id": "r3"}, data=False)
    expected = {key: truth(tq, tq_partition, key) for key in tq.kv_list(tq_partition)[tq_partition]}

    with windowed_store(ray_cluster, request_batch=4) as store:
        store.take_request_stats()
        listed = store.list_keys(tq_partition)
        requests = store.take_request_stats()

    assert {key: Identity(identity.tags_digest, listed.get(key)) for key, identity in expected.items()} == (
        expected
    )
    assert len(listed) == 4 * 7 - 7 + 9 + 1
    assert set(requests) == {"partition_index_page", "get_partition_index_range", "partition_keys_window"}


def test_list_keys_reads_the_keys_beside_the_job_requests_in_windows_and_asks_no_kv_retrieve_keys(
    ray_cluster: Any, tq: Any, tq_partition: str, other_partition: str, put_rows: PutRows
) -> None:
    """kv_retrieve_keys is served on the controller's request thread, one request at a time with the
    job's: a swept partition's keys are read on its actor thread instead, in windows of KeyWindows.size
    indexes (not the pacer's), and are exactly TQ's own, holes and reused indexes included."""
    for round_ in range(3):
        put_rows(tq_partition, [f"a{round_}-{i}" for i in range(9)], {"r": round_})
        put_rows(other_partition, [f"b{round_}-{i}" for i in range(4)], {"other": True})
    tq.kv_clear([f"a1-{i}" for i in range(0, 9, 2)], tq_partition)
    put_rows(tq_partition, [f"late-{i}" for i in range(6)])  # reused indexes
    expected = global_indexes(tq, tq_partition)
    _, size = index_space(tq_partition)
    config = TransferQueueConfig(ray_address=ray_cluster.address)

    with TransferQueueRowStore.attach(config, key_windows=KeyWindows(size=5), fixed=BATCH_4) as store:
        store.take_request_stats()
        listed = store.list_keys(tq_partition)
        requests = store.take_request_stats()

    assert listed == expected
    assert len(requests["partition_keys_window"]) == -(-size // 5)  # windows of 5, not the pacer's 1-4
    assert "kv_retrieve_keys" not in requests


def test_a_controller_the_key_windows_do_not_fit_gives_the_keys_through_kv_retrieve_keys_and_a_warning(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows, caplog: pytest.LogCaptureFixture
) -> None:
    """The key windows read TQ's own {index: key} map, which another TQ version may not have: the first
    window that fails so makes the store ask kv_retrieve_keys, in the pacer's windows, for good."""
    put_rows(tq_partition, [f"k{i}" for i in range(12)], {"t": 1})
    tq.kv_clear(["k3", "k7"], tq_partition)
    expected = global_indexes(tq, tq_partition)

    def another_tq_version(controller: Any, partition: str, indexes: Any) -> Any:
        return controller.key_bookkeeping_of_another_version

    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with TransferQueueRowStore.attach(
        config, key_windows=KeyWindows(reader=another_tq_version), fixed=BATCH_4
    ) as store:
        (first, second), (first_requests, second_requests), warnings = listed_twice(
            store, tq_partition, caplog, "tq_gc.stores.transferqueue.key_windows"
        )

    assert first == second == expected
    assert len(first_requests["partition_keys_window"]) == 1
    assert "partition_keys_window" not in second_requests
    assert len(second_requests["kv_retrieve_keys"]) >= 12 // 4  # the pacer's windows of at most 4
    assert len(warnings) == 1 and "kv_retrieve_keys" in warnings[0], warnings


def listed_twice(
    store: TransferQueueRowStore, partition: str, caplog: pytest.LogCaptureFixture, logger: str
) -> tuple[list[dict[str, int]], list[dict[str, list[float]]], list[str]]:
    """list_keys twice: the two listings, the requests each made, and the warnings `logger` gave."""
    store.take_request_stats()
    listings, requests = [], []
    with caplog.at_level("WARNING", logger=logger):
        for _ in range(2):
            listings.append(store.list_keys(partition))
            requests.append(store.take_request_stats())
    return listings, requests, [r.getMessage() for r in caplog.records if r.name == logger]


def global_indexes(tq: Any, partition: str) -> dict[str, int | None]:
    """{key: global index} of every key the partition has, from TQ itself (kv_list, then one key a
    request)."""
    listed = tq.kv_list(partition).get(partition, {})
    return {key: identity.global_index for key in listed if (identity := truth(tq, partition, key))}


def index_space(partition: str) -> tuple[int, int]:
    """(the end of TQ's global index space, the partition's number of indexes), from the controller."""
    import ray

    def read(controller: Any, partition: str) -> tuple[int, int]:
        manager = controller.index_manager
        return manager.global_index_counter, len(manager.partition_to_indexes.get(partition, ()))

    answer: tuple[int, int] = ray.get(find_controller("").__ray_call__.remote(read, partition))
    return answer


def test_the_global_indexes_come_in_bounded_pages_of_the_index_space_not_in_one_copy_of_the_set(
    ray_cluster: Any, tq: Any, tq_partition: str, other_partition: str, put_rows: PutRows
) -> None:
    """get_partition_index_range copies a partition's whole index set in one call that holds the
    controller's GIL (60-290 ms at 1M rows): the job's requests wait for it. A partition bigger than a
    page is read in pages of IndexPaging.span indexes of the whole space instead, each a bounded amount
    of work, up to the end of the space as the first answer gave it; by list_keys and list_rows."""
    for round_ in range(5):  # the two partitions' indexes interleave, and the page edges fall anywhere
        tags = [{"r": round_, "i": i} for i in range(7)]
        put_rows(tq_partition, [f"a{round_}-{i}" for i in range(7)], tags)
        put_rows(other_partition, [f"b{round_}-{i}" for i in range(5)], {"other": True})
    tq.kv_clear([f"a1-{i}" for i in range(7)] + ["a3-2"], tq_partition)
    put_rows(tq_partition, [f"late-{i}" for i in range(9)], {"late": True})  # reused indexes
    expected = tq.kv_list(tq_partition)[tq_partition]
    indexes = global_indexes(tq, tq_partition)
    end, size = index_space(tq_partition)
    span = max(1, end // 3)  # the page edges fall anywhere
    pages = 1 + -(-end // span)  # the first answer, then the pages
    config = TransferQueueConfig(ray_address=ray_cluster.address)

    with TransferQueueRowStore.attach(
        config,
        fixed=BATCH_4,
        index_paging=IndexPaging(span=span, copy_max=size - 1),  # just too big for one copy
    ) as store:
        store.take_request_stats()
        keys = store.list_keys(tq_partition)
        keys_requests = store.take_request_stats()
        rows = store.list_rows(tq_partition)
        rows_requests = store.take_request_stats()

    assert size == len(expected)
    assert keys == indexes
    assert rows == expected
    assert len(keys_requests["partition_index_page"]) == pages
    assert "get_partition_index_range" not in keys_requests
    assert len(rows_requests["partition_index_page"]) == 2 * pages  # each of its two passes
    assert "get_partition_index_range" not in rows_requests


def test_a_partition_of_at_most_copy_max_indexes_is_read_in_one_copy(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    """The pages cost the whole index space, every partition's, and a round trip each: a small partition
    beside big ones is read in one copy (even with pages of one index)."""
    put_rows(tq_partition, [f"k{i}" for i in range(10)])
    expected = global_indexes(tq, tq_partition)
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(batch=4, quiet_ms=0)

    with TransferQueueRowStore.attach(
        config, index_paging=IndexPaging(span=1, copy_max=10), fixed=fixed
    ) as store:
        store.take_request_stats()
        keys = store.list_keys(tq_partition)
        requests = store.take_request_stats()

    assert keys == expected
    assert len(requests["partition_index_page"]) == 1  # the first answer: the partition's size
    assert len(requests["get_partition_index_range"]) == 1


def test_listing_a_partition_tq_does_not_have_gives_nothing_and_creates_nothing(
    ray_cluster: Any, tq: Any
) -> None:
    import ray

    never_made = f"tqgc-never-made-{uuid.uuid4().hex[:8]}"
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with TransferQueueRowStore.attach(config, fixed=BATCH_4) as store:
        assert store.list_keys(never_made) == {}
        assert store.list_rows(never_made) == {}
        assert never_made not in store.partitions()
    controller = find_controller("")
    held = ray.get(controller.__ray_call__.remote(lambda c: set(c.index_manager.partition_to_indexes)))
    assert never_made not in held


def test_a_controller_the_paged_read_does_not_fit_gives_its_index_range_once_asked_and_a_warning(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows, caplog: pytest.LogCaptureFixture
) -> None:
    """The pages read TQ's own index bookkeeping, which another TQ version may not have: the first
    page that fails so makes the store fall back to get_partition_index_range, for good, and say so."""
    put_rows(tq_partition, [f"k{i}" for i in range(12)], {"t": 1})
    tq.kv_clear(["k3"], tq_partition)
    expected = global_indexes(tq, tq_partition)

    def another_tq_version(controller: Any, partition: str, start: int, stop: int) -> Any:
        return controller.partition_index_bookkeeping_of_another_version

    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with TransferQueueRowStore.attach(
        config, index_paging=IndexPaging(copy_max=0, reader=another_tq_version), fixed=BATCH_4
    ) as store:
        (first, second), (first_requests, second_requests), warnings = listed_twice(
            store, tq_partition, caplog, "tq_gc.stores.transferqueue.index_range"
        )

    assert first == second == expected
    assert len(first_requests["partition_index_page"]) == 1
    assert len(first_requests["get_partition_index_range"]) == 1
    assert "partition_index_page" not in second_requests
    assert len(second_requests["get_partition_index_range"]) == 1
    assert len(warnings) == 1 and "get_partition_index_range" in warnings[0], warnings


def test_list_keys_reuses_a_recent_index_range_and_sees_every_row_it_holds_as_it_is_now(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    """Within FixedPacing.index_range_reuse_seconds a listing of a swept partition reads the keys of
    the indexes the last one had, without asking the controller for them again. Rows deleted since are
    gone from it, rows put since are not in it yet (the next full listing sees them): it never lists a
    row that is not there, and every row it held that is still there keeps its index, so its record
    stays. list_rows (a reference source's partition) always asks."""
    put_rows(tq_partition, [f"old-{i}" for i in range(6)])
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(batch=4, index_range_reuse_seconds=3600)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        first = store.list_keys(tq_partition)
        tq.kv_clear(["old-0", "old-1"], tq_partition)
        put_rows(tq_partition, ["new-0"])
        store.take_request_stats()
        second = store.list_keys(tq_partition)
        reused = store.take_request_stats()
        store.list_rows(tq_partition)
        full = store.take_request_stats()

    assert set(first) == {f"old-{i}" for i in range(6)}
    held = {key: index for key, index in first.items() if key not in ("old-0", "old-1")}
    new_index = truth(tq, tq_partition, "new-0").global_index
    if new_index in first.values():  # TQ gave new-0 a freed index the cached range holds
        held["new-0"] = new_index
    assert second == held
    assert "partition_index_page" not in reused
    assert full["partition_index_page"]  # asked again (for each of its two passes)


def test_list_keys_asks_for_the_index_range_again_once_the_reuse_time_is_over(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, ["a"])
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(batch=4, index_range_reuse_seconds=0)
    with TransferQueueRowStore.attach(config, fixed=fixed) as store:
        store.list_keys(tq_partition)
        put_rows(tq_partition, ["b"])
        store.take_request_stats()
        assert set(store.list_keys(tq_partition)) == {"a", "b"}
        assert store.take_request_stats()["partition_index_page"]


def test_a_store_without_the_controllers_handle_lists_keys_through_kv_list(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, [f"k{i}" for i in range(30)], {"t": 1})
    tq.kv_clear(["k3", "k7"], tq_partition)
    client = open_client(find_controller(ray_cluster.address), 30.0)
    with TransferQueueRowStore(client, request_batch=8) as bare, windowed_store(ray_cluster, 8) as paced:
        assert bare.list_keys(tq_partition) == paced.list_keys(tq_partition)
        assert len(bare.list_keys(tq_partition)) == 28
        assert set(bare.take_request_stats()) == {"kv_list", "kv_retrieve_meta"}


class ListingWithWriter(TransferQueueRowStore):
    """Runs `writer(window number)` before each window of keys the listing reads: a job writing and
    clearing rows while tq-gc lists."""

    writer: Callable[[int], None] = staticmethod(lambda n: None)
    windows_read = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        keys_of = self._listing._keys_of  # the listing's read of one window's keys (listing.py)

        def writer_first(*args: Any, **kwargs: Any) -> tuple[dict[int, str], float]:
            self.writer(self.windows_read)
            self.windows_read += 1
            return keys_of(*args, **kwargs)

        self._listing._keys_of = writer_first  # type: ignore[method-assign]


def listing_with_writer(ray_cluster: Any, writer: Callable[[int], None]) -> ListingWithWriter:
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    store = ListingWithWriter.attach(config, fixed=BATCH_4)
    assert isinstance(store, ListingWithWriter)
    store.writer = writer
    return store


def test_rows_present_for_the_whole_listing_are_listed_while_others_come_and_go(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    stable = {f"stable-{i}": {"i": i} for i in range(40)}
    churn = [f"churn-{i}" for i in range(60)]
    put_rows(tq_partition, churn[:20], {"churn": True})
    put_rows(tq_partition, list(stable), list(stable.values()))

    def job_writes_and_clears(window: int) -> None:
        if window + 20 < len(churn):
            put_rows(tq_partition, [churn[window + 20]], {"churn": True})  # takes a freed index
            tq.kv_clear([churn[window]], tq_partition)

    with listing_with_writer(ray_cluster, job_writes_and_clears) as store:
        listed = store.list_rows(tq_partition)
        assert store.windows_read >= 10

    assert {key: listed.get(key) for key in stable} == stable
    assert set(listed) <= set(stable) | set(churn)
    assert all(listed[key] == {"churn": True} for key in set(listed) - set(stable))


def test_a_reference_moved_once_from_row_to_row_during_the_listing_is_listed(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows
) -> None:
    """Make-before-break inside a tags source: the new row is written, then the old one cleared, right
    after the listing read the partition's indexes. The old row sat in a window not read yet, the new one
    is not among the indexes read: one pass over the indexes misses both; kv_list's snapshot saw one."""
    put_rows(tq_partition, [f"filler-{i}" for i in range(30)], {"filler": True})
    put_rows(tq_partition, ["holder-old"], {"cleanup_staging_keys": ["r7/call3"]})  # the last window

    def move_the_reference(window: int) -> None:
        if window == 0:
            put_rows(tq_partition, ["holder-new"], {"cleanup_staging_keys": ["r7/call3"]})
            tq.kv_clear(["holder-old"], tq_partition)

    with listing_with_writer(ray_cluster, move_the_reference) as store:
        listed = store.list_rows(tq_partition)

    assert listed.get("holder-new") == {"cleanup_staging_keys": ["r7/call3"]}
    assert len([key for key in listed if key.startswith("filler-")]) == 30


def test_request_stats_name_each_request_and_start_afresh_when_taken(
    store: TransferQueueRowStore, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, ["a", "b", "c"], {"t": 1})
    store.take_request_stats()  # whatever attaching asked

    rows = store.list_rows(tq_partition)
    listing = store.take_request_stats()
    store.delete_if_unchanged(tq_partition, store.identities(tq_partition, list(rows)))
    deleting = store.take_request_stats()

    assert set(listing) == {
        "partition_index_page",  # the size, then the pages (no copy while waiting for quiet moments)
        "kv_retrieve_keys",
        "kv_retrieve_meta",
        "partition_keys_window",  # the rows' bytes, in the first pass's windows, beside the job's requests
    }
    assert len(listing["partition_index_page"]) >= 4  # once per pass
    assert set(deleting) == {"kv_retrieve_meta", "clear_samples"}
    assert all(seconds > 0 for durations in [*listing.values(), *deleting.values()] for seconds in durations)
    assert store.take_request_stats() == {}


# ---- interrupting a paced read: the sidecar's shutdown during a long listing --------------------------


def test_interrupt_stops_a_paced_listing_before_its_next_request_and_deletes_still_finish(
    ray_cluster: Any, tq_partition: str, put_rows: PutRows
) -> None:
    put_rows(tq_partition, [f"row-{i}" for i in range(300)], {"t": 1})
    # Windows of 2-8 indexes and a pause of 99x each request: this listing would take minutes (the job
    # never idle: an idle job's controller gets no pauses).
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(batch=8, job_idle_ms=JOB_NEVER_IDLE_MS)
    with TransferQueueRowStore.attach(config, duty_cycle=0.01, fixed=fixed) as store:
        outcome: list[BaseException | dict[str, Any]] = []

        def listing() -> None:
            try:
                outcome.append(store.list_rows(tq_partition))
            except BaseException as exc:
                outcome.append(exc)

        reader = threading.Thread(target=listing)
        reader.start()
        deadline = time.monotonic() + 30
        while not store.take_request_stats().get("kv_retrieve_keys") and time.monotonic() < deadline:
            time.sleep(0.05)  # until the listing is past its first window
        store.interrupt()
        reader.join(timeout=30)

        assert not reader.is_alive(), "the listing went on after interrupt()"
        assert len(outcome) == 1 and isinstance(outcome[0], Interrupted), outcome
        with pytest.raises(Interrupted):
            store.identities(tq_partition, ["row-1"])
        with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as other:
            expected = other.identities(tq_partition, ["row-1", "row-2"])
        assert store.delete_if_unchanged(tq_partition, expected) == {"row-1", "row-2"}


@pytest.mark.parametrize(("target_ms", "clears"), [(1e-6, 16), (1e6, 5)])
def test_delete_batches_shrink_when_the_re_check_and_clear_are_slow_and_stay_full_when_fast(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: PutRows, target_ms: float, clears: int
) -> None:
    """Batches of request_batch=40 to start; every pair slower than the target halves the next, down to
    10 (40, 20, then 14 of 10: 16 clears for 200 rows); fast ones keep it at 40 (5 clears)."""
    keys = [f"row-{i:03d}" for i in range(200)]
    put_rows(tq_partition, keys, {"t": 1})
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    fixed = FixedPacing(batch=40, request_target_ms=target_ms)
    with TransferQueueRowStore.attach(config, duty_cycle=1.0, fixed=fixed) as store:
        expected = store.identities(tq_partition, keys)
        store.take_request_stats()
        assert store.delete_if_unchanged(tq_partition, expected) == set(keys)
        assert len(store.take_request_stats()["clear_samples"]) == clears
    assert tq.kv_list(tq_partition).get(tq_partition, {}) == {}


def test_the_store_yields_no_delete_batch_once_it_is_asked_to_stop(
    ray_cluster: Any, tq: Any, tq_partition: str
) -> None:
    """A sweep stops between two delete batches: the batch yielded before the store was asked to stop
    is the sweep's to clear, and the next raises Interrupted before it is yielded (before its re-check)."""
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with TransferQueueRowStore.attach(config, fixed=FixedPacing(batch=2, quiet_ms=0)) as store:
        batches = store.delete_batches(tq_partition, ["a", "b", "c", "d"])
        assert next(batches) == ["a", "b"]
        store.interrupt()
        with pytest.raises(Interrupted):
            next(batches)
