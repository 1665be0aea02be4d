"""The route plans a replay index's tags carry, read as NeMo's strict `decode_route_plan` reads them
(nemo_rl/experience/route_plan.py): versions 1 and 2 are both published (on different branches), told
apart by their `schema_version` and their spans' fields; a plan NeMo's decoder refuses, so that its
restore stops, fails closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tq_gc.errors import ReferenceSourceError
from tq_gc.rows import RowId

from support.nemo_rl_checkpoints import write_point
from support.nemo_rl_data_plane import CANONICAL, STAGING
from support.nemo_rl_ledgers import ledger_v3
from support.nemo_rl_oracle import RestoreRefused, restore_keeps
from support.nemo_rl_reading import read
from support.nemo_rl_snapshots import replay_index, route_plan


def write_plan(ckpt: Path, plan: dict[str, Any]) -> None:
    index = replay_index({"g5": []})
    index["groups"][0]["meta"].tags[0]["route_assembly_plan"] = plan
    write_point(ckpt / "step_3", ledger_v3([]), replay=index)


@pytest.mark.parametrize("schema_version", [1, 2])
def test_route_plans_of_both_published_versions_read(ckpt: Path, schema_version: int) -> None:
    write_plan(ckpt, route_plan(["route/1", "route/2"], schema_version=schema_version))
    assert read(ckpt) == {RowId(STAGING, "route/1"), RowId(STAGING, "route/2"), RowId(CANONICAL, "g5_g0")}
    assert restore_keeps(ckpt) == {"route/1", "route/2"}


def respan(plan: dict[str, Any], like: int) -> dict[str, Any]:
    """`plan` with the spans of a version-`like` plan."""
    return {**plan, "spans": route_plan(["route/1"], schema_version=like)["spans"]}


@pytest.mark.parametrize(
    "plan",
    [
        {**route_plan(["route/1"]), "schema_version": 3},
        {**route_plan(["route/1"]), "schema_version": "2"},
        respan(route_plan(["route/1"], schema_version=1), like=2),
        respan(route_plan(["route/1"], schema_version=2), like=1),
        {**route_plan(["route/1"]), "weights": []},
        {key: value for key, value in route_plan(["route/1"]).items() if key != "spans"},
        {**route_plan(["route/1"]), "spans": ["route/1"]},
    ],
    ids=[
        "version-3",
        "version-a-string",
        "v1-with-v2-spans",
        "v2-with-v1-spans",
        "extra-field",
        "no-spans",
        "span-not-object",
    ],
)
def test_a_route_plan_nemo_cannot_decode_fails_closed(ckpt: Path, plan: dict[str, Any]) -> None:
    write_plan(ckpt, plan)
    with pytest.raises(ReferenceSourceError, match=r"route_assembly_plan"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)
