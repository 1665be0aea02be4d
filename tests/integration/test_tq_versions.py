"""What tq-gc reads inside a real TransferQueue controller, on whichever supported TQ this venv has (CI
runs this file on each: scripts/test): every controller function fits, the probe at attach says which
do not and the store then never tries them, and a controller of another TQ is refused before any
request, naming both versions (the CronJob's image must carry the job's TQ)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import keys_in

from tools.testbed.cli import TQ_GC, cli_env
from tq_gc.config import TransferQueueConfig
from tq_gc.errors import ConfigError
from tq_gc.stores.transferqueue import TransferQueueRowStore
from tq_gc.stores.transferqueue.attach import find_controller
from tq_gc.stores.transferqueue.controller_function import MISFITS_FOUND
from tq_gc.stores.transferqueue.internals import INDEX_PAGES, QUIET_WAITS, READ_FROM, controller_probe
from tq_gc.stores.transferqueue.pacing import FixedPacing
from tq_gc.stores.transferqueue.requests import TqRequests

from support.tq_venvs import NEWEST, python_of

pytestmark = pytest.mark.ray

CLI_TIMEOUT_S = 180


@pytest.fixture
def functions_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each function the store runs on the controller through Ray, and of the wait inside
    it when there is one, in order."""
    names: list[str] = []
    actor_call = TqRequests.actor_call

    def recording(self: TqRequests, op: str | None, what: str, actor: Any, method: str, *args: Any) -> Any:
        if method == "__ray_call__":
            names.append(args[0].__name__)
            if args[0].__name__ == "in_quiet_moment" and args[1] is not None:
                names.append("wait_quiet")
        return actor_call(self, op, what, actor, method, *args)

    monkeypatch.setattr(TqRequests, "actor_call", recording)
    return names


def probe_saying(**found: Any) -> Callable[[Any], dict[str, Any]]:
    """The real probe, run on the real controller, with some of its answers replaced by `found`."""
    real = controller_probe()

    def probe(controller: Any) -> dict[str, Any]:
        return {**real(controller), **found}

    return probe


def test_this_venvs_transferqueue_is_one_tq_gc_was_read_from(tq: Any) -> None:
    assert tq.__version__ in READ_FROM, f"TransferQueue {tq.__version__}: read its code into internals.py"


def test_every_controller_function_fits_this_transferqueue_and_check_says_so(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, [f"k{i}" for i in range(20)])  # keys for the probe's look at the key maps
    with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
        said = store.describe()["TransferQueue controller functions"]
        listed = store.list_keys(tq_partition)
        requests = store.take_request_stats()
        waited = store.wait_for_quiet()

    assert said.startswith(f"TransferQueue {tq.__version__} (read from {', '.join(READ_FROM)})"), said
    assert said.endswith("index pages: fit; key windows: fit; quiet waits: fit"), said
    assert set(listed) == {f"k{i}" for i in range(20)}
    assert "partition_index_page" in requests and "partition_keys_window" in requests, requests
    assert "kv_retrieve_keys" not in requests and "get_partition_index_range" not in requests, requests
    assert waited.found  # an idle controller's quiet moment, found by this TQ's request loop


def test_functions_the_probe_finds_do_not_fit_are_never_tried_named_by_check_and_counted(
    ray_cluster: Any,
    tq: Any,
    tq_partition: str,
    put_rows: Any,
    functions_run: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    put_rows(tq_partition, [f"k{i}" for i in range(9)])
    before = MISFITS_FOUND.counts()
    probe = probe_saying(**{QUIET_WAITS: "no request loop here", INDEX_PAGES: "no index manager here"})
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    attached = TransferQueueRowStore.attach(config, controller_probe=probe, fixed=FixedPacing(batch=4))
    with caplog.at_level("WARNING"), attached as store:
        store.take_request_stats()
        listed = store.list_keys(tq_partition)
        waits = [store.wait_for_quiet() for _ in range(2)]
        requests = store.take_request_stats()
        said = store.describe()["TransferQueue controller functions"]
        delete_batches = [len(b) for b in store.delete_batches(tq_partition, sorted(listed))]
    after = MISFITS_FOUND.counts()

    assert set(listed) == {f"k{i}" for i in range(9)}
    assert "wait_quiet" not in functions_run and "read_page" not in str(functions_run), functions_run
    assert "get_partition_index_range" in requests and "partition_index_page" not in requests, requests
    assert "partition_keys_window" in requests, "the key windows still fit"
    assert not any(wait.found for wait in waits)
    assert delete_batches == [4, 4, 1]  # whole request batches: no quiet moment to fit them in
    assert "quiet waits: not available on this TransferQueue (no request loop here)" in said
    assert "index pages: not available on this TransferQueue" in said and "key windows: fit" in said
    for name in (QUIET_WAITS, INDEX_PAGES):
        assert after.get(name, 0) == before.get(name, 0) + 1, (before, after)
    warned = [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()]
    assert len(warned) == 2, warned


def test_key_maps_that_disagree_make_index_pages_and_key_windows_misfit_and_tqs_calls_list_right(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    """What the functions' answers mean is checked too: an index that TQ's {index: key} map gives a key
    its {key: index} map and index set do not know (here written into the real controller's bookkeeping,
    and taken out after) makes the probe say no, and the listing comes from TQ's own calls."""
    import ray

    put_rows(tq_partition, ["k0", "k1"])
    ghost_index = 10**9

    def haunt(controller: Any, partition: str, index: int, add: bool) -> None:
        owners = controller.partitions[partition].revert_keys_mapping
        if add:
            owners[index] = "ghost"
        else:
            owners.pop(index, None)

    controller = find_controller("")
    ray.get(controller.__ray_call__.remote(haunt, tq_partition, ghost_index, True))
    try:
        with TransferQueueRowStore.attach(TransferQueueConfig(ray_address=ray_cluster.address)) as store:
            said = store.describe()["TransferQueue controller functions"]
            store.take_request_stats()
            listed = store.list_keys(tq_partition)
            requests = store.take_request_stats()
    finally:
        ray.get(controller.__ray_call__.remote(haunt, tq_partition, ghost_index, False))

    assert f"index {ghost_index} maps to key 'ghost'" in said, said
    assert "index pages: not available on this TransferQueue" in said, said
    assert "key windows: not available on this TransferQueue" in said, said
    assert "quiet waits: fit" in said, said
    assert set(listed) == {"k0", "k1"}
    assert "kv_retrieve_keys" in requests and "get_partition_index_range" in requests, requests


def test_a_controller_of_another_transferqueue_is_refused_before_any_request(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, functions_run: list[str]
) -> None:
    put_rows(tq_partition, ["k"])
    config = TransferQueueConfig(ray_address=ray_cluster.address)
    with pytest.raises(ConfigError) as refused:
        TransferQueueRowStore.attach(config, controller_probe=probe_saying(tq_version="0.0.1"))

    message = str(refused.value)
    assert f"runs transferqueue 0.0.1; tq-gc here runs transferqueue {tq.__version__}" in message
    assert "--build-arg TQ_VERSION=0.0.1" in message
    assert functions_run == [], "no request of the store's"
    assert keys_in(tq, tq_partition) == {"k"}  # the job's TQ still serves


def test_check_names_the_controllers_tq_and_which_controller_functions_fit(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, redis_url: str, tmp_path: Path
) -> None:
    put_rows(tq_partition, ["k"])  # the scope partition exists (check fails one close to another's)
    config = write_config(tmp_path, ray_cluster.address, redis_url, tq_partition)
    env = {**cli_env(), "COLUMNS": "1000"}  # check's table on one line a row
    checked = subprocess.run(
        [str(TQ_GC), "check", "--config", str(config)],
        capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    [line] = [line for line in checked.stdout.splitlines() if "TransferQueue controller functions" in line]
    assert f"TransferQueue {tq.__version__} (read from" in line, line
    assert "index pages: fit; key windows: fit; quiet waits: fit" in line, line


def write_config(tmp_path: Path, ray_address: str, redis_url: str, partition: str) -> Path:
    config = tmp_path / "tq-gc.yaml"
    settings = {
        "namespace": "tq-versions",
        "state_url": redis_url,
        "transfer_queue": {"ray_address": ray_address},
        "scope": [{"partition": partition, "all_keys": True}],
    }
    config.write_text(yaml.safe_dump(settings))
    return config


def test_the_cli_of_another_supported_transferqueue_exits_2_naming_both_versions_and_leaves_tq_serving(
    ray_cluster: Any, tq: Any, tq_partition: str, put_rows: Any, redis_url: str, tmp_path: Path
) -> None:
    """The CronJob's case: tq-gc installed with one TQ (here: another supported TQ's venv), the job's
    controller running another. Both the sweep and check end at attach, with exit 2."""
    other = NEWEST if tq.__version__ != NEWEST else READ_FROM[0]
    tq_gc = python_of(other).with_name("tq-gc")
    put_rows(tq_partition, ["k"])
    config = write_config(tmp_path, ray_cluster.address, redis_url, tq_partition)
    env = cli_env()
    env.pop("PYTHONPATH", None)  # the other venv's own tq-gc (editable: this checkout), not pytest's path
    env["COLUMNS"] = "1000"  # check's table on one line a row

    results = [
        subprocess.run(
            [str(tq_gc), *args, "--config", str(config)],
            capture_output=True,
            text=True,
            env=env,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        for args in (("sweep", "--execute", "--json"), ("check",))
    ]

    for result in results:
        said = result.stdout + result.stderr
        assert result.returncode == 2, said[-4000:]
        assert f"runs transferqueue {tq.__version__}; tq-gc here runs transferqueue {other}" in said, said
    assert keys_in(tq, tq_partition) == {"k"}
    assert sys.executable != str(python_of(other))
