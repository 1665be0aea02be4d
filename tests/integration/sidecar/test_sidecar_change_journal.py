"""A sidecar started with the change journal (start_sidecar(config, change_journal=True), `tq-gc serve
--change-journal`), on a real Ray cluster and a real TQ: its second sweep lists by the journal and says so
in its report, sees the rows the job put and cleared in between, and plans as a full listing would; its
stop puts the controller's own methods back. The journal itself: tests/integration/test_change_journal.py."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from harness import keys_in

from tq_gc.sidecar.client import sidecar_registry, stop_sidecar
from tq_gc.stores.transferqueue.change_journal import JOURNAL_ATTRIBUTE, MUTATIONS
from tq_gc.stores.transferqueue.journalled_keys import FIRST_LISTING, JOURNAL_OFF

from .helpers import MakeConfig, StartSidecar, call, name_of, wait_until

pytestmark = pytest.mark.ray

ORPHANS = [f"orphan-{i}" for i in range(6)]
REFERENCED = [f"held-{i}" for i in range(3)]
CLEARED = "orphan-2"  # the job clears it between the two sweeps
LATE = "late"  # the job puts it between the two sweeps, after the clear: it may take the freed index
ADMISSION_TTL_S = 600.0
# Sweeps further apart than the grace restart every row's clock (docs/safety.md, rule 3): the sweeps here
# are on demand, a few seconds apart, and a row put between two of them must still be within its grace
# when the first ones' grace has passed. Seconds of margin each way on a busy machine.
GRACE_S = 10.0
BEFORE_SECOND_SWEEP_S = 4.0


def controller() -> Any:
    import ray

    return ray.get_actor("TransferQueueController", namespace="transfer_queue")


def journal_in_controller() -> tuple[bool, list[str]]:
    """Whether the controller holds a change journal, and which mutating methods the instance has of its
    own (the journal's wrappers; none: TQ's own methods)."""
    import ray
    import transfer_queue

    names = sorted(MUTATIONS[transfer_queue.__version__])

    def look(c: Any) -> tuple[bool, list[str]]:
        return JOURNAL_ATTRIBUTE in c.__dict__, sorted(n for n in names if n in c.__dict__)

    found: tuple[bool, list[str]] = ray.get(controller().__ray_call__.remote(look), timeout=60)
    return found


def wait_after(since: str, seconds: float) -> None:
    """Until `seconds` after `since` (ISO time of a sweep's end: the sidecar's clock, this host's too)."""
    at = datetime.fromisoformat(since).timestamp() + seconds
    wait_until(f"{seconds:g} s after {since}", lambda: time.time() > at, seconds + 30)


def deleted(report: dict[str, Any]) -> set[str]:
    return {row["key"] for row in report["deleted_sample"]}


def test_the_second_sweep_lists_by_the_journal_and_plans_as_a_full_listing_would(
    make_config: MakeConfig, sidecar: StartSidecar, tq: Any, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ORPHANS + REFERENCED, {"t": 1})
    config = make_config(grace_seconds=GRACE_S, schedule={"interval_seconds": 3600})
    handle = sidecar(config, change_journal=True)
    assert call(handle, "status")["change_journal"] is True
    sidecar_registry(name_of(handle)).admit(
        "held", rows={tq_partition: REFERENCED}, ttl_seconds=ADMISSION_TTL_S
    )

    first = call(handle, "sweep_now")
    assert first["outcome"] == "completed" and first["counts"]["deleted"] == 0
    assert first["listings"] == {tq_partition: {"by": "full", "why": FIRST_LISTING, "indexes_reread": None}}
    assert journal_in_controller()[0] is True

    tq.kv_clear([CLEARED], tq_partition)  # the job's own work between the sweeps
    put_rows(tq_partition, [LATE], {"t": 2})
    wait_after(first["finished_at"], BEFORE_SECOND_SWEEP_S)
    listed_now = keys_in(tq, tq_partition)
    second = call(handle, "sweep_now")

    how = second["listings"][tq_partition]
    assert how["by"] == "journal" and how["why"] is None and how["indexes_reread"] >= 1, how
    assert second["counts"]["listed"] == len(listed_now) == len(ORPHANS) - 1 + len(REFERENCED) + 1
    assert second["counts"]["within_grace"] == len(ORPHANS) - 1 + 1  # the late row's grace starts now
    assert second["counts"]["deleted"] == 0

    wait_after(first["finished_at"], GRACE_S + 0.5)
    third = call(handle, "sweep_now")
    # A full listing's plan: every orphan both sweeps saw is past its grace, the late row within it.
    assert third["listings"][tq_partition]["by"] == "journal"
    assert deleted(third) == set(ORPHANS) - {CLEARED}
    assert third["counts"]["within_grace"] == 1
    assert third["counts"]["referenced"]["admissions"] == len(REFERENCED)
    assert keys_in(tq, tq_partition) == set(REFERENCED) | {LATE}

    wait_after(second["finished_at"], GRACE_S + 0.5)
    fourth = call(handle, "sweep_now")  # the sweep's own clears are mutations too: re-read, not relisted
    assert fourth["listings"][tq_partition]["by"] == "journal"
    assert deleted(fourth) == {LATE}
    assert keys_in(tq, tq_partition) == set(REFERENCED)


def test_stopping_the_sidecar_puts_the_controllers_own_methods_back(
    make_config: MakeConfig, sidecar: StartSidecar, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ORPHANS, {"t": 1})
    assert journal_in_controller() == (False, [])
    handle = sidecar(make_config(schedule={"interval_seconds": 3600}), change_journal=True)
    assert call(handle, "sweep_now")["outcome"] == "completed"
    holds, wrapped = journal_in_controller()
    assert holds and wrapped, "the sidecar's sweep installed the journal"

    stop_sidecar(handle)

    assert journal_in_controller() == (False, [])


def test_a_sidecar_started_without_it_lists_in_full_and_installs_nothing(
    make_config: MakeConfig, sidecar: StartSidecar, tq_partition: str, put_rows: Any
) -> None:
    put_rows(tq_partition, ORPHANS, {"t": 1})
    handle = sidecar(make_config(schedule={"interval_seconds": 3600}))
    assert call(handle, "status")["change_journal"] is False
    in_full = {tq_partition: {"by": "full", "why": JOURNAL_OFF, "indexes_reread": None}}
    for _ in range(2):
        assert call(handle, "sweep_now")["listings"] == in_full
    assert journal_in_controller() == (False, [])
