"""What a NeMo RL recovery point's files hold, read as NeMo's loaders read them: an object of a class
tq-gc does not know is inert where no rows are named (wandb Histograms in the replay index's
rollout_metrics) and fails closed where keys are read, and nothing of the file runs on load; ledger
schema 4's two layouts told apart by shape; a sealed receipt that is another attempt's refused."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

from tq_gc.errors import ReferenceSourceError
from tq_gc.rows import RowId

from support.nemo_rl_checkpoints import RunsCode, write_checkpoint, write_point
from support.nemo_rl_data_plane import (
    CANONICAL,
    HISTOGRAM_MODULE,
    Histogram,
    importable,
    nemo_modules,
)
from support.nemo_rl_ledgers import (
    attempt_v4,
    inventory,
    ledger_v3,
    ledger_v4,
    lineage_group_v4,
    prompt_group_v4,
)
from support.nemo_rl_reading import read, staging
from support.nemo_rl_snapshots import replay_index

# -- objects in fields that name no rows -------------------------------------------------------------------


class WritesOnBuild:
    """A class whose own `__setstate__` would create `marker`: a loader that builds it runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).mkdir()


WritesOnBuild.__module__ = "nemo_rl_test_evil"


def replay_with(metrics: Any = None, tag: Any = None) -> dict[str, Any]:
    index = replay_index({"g5": ["route/5a"]})
    meta = index["groups"][0]["meta"]
    if metrics is not None:
        meta.extra_info["rollout_metrics"] = metrics
    if tag is not None:
        meta.tags.append(tag)
    return index


def write_replay_point(step: Path, index: dict[str, Any]) -> None:
    """A checkpoint whose replay index holds `index`, written by torch.save with wandb's module path
    importable (as in NeMo's process)."""
    with importable(HISTOGRAM_MODULE, Histogram=Histogram):
        write_point(step, ledger_v3([]), replay=index)


def test_a_wandb_histogram_in_the_replay_indexs_rollout_metrics_is_inert_and_the_sweep_reads(
    ckpt: Path,
) -> None:
    index = replay_with(metrics={"reward": Histogram([0.0, 1.0]), "turns": 3})
    write_replay_point(ckpt / "step_3", index)
    assert read(ckpt) == staging("route/5a") | {RowId(CANONICAL, "g5_g0")}


@pytest.mark.parametrize("where", ["tag", "sample_ids", "meta", "cleanup_staging_keys"])
def test_the_same_object_where_keys_are_read_fails_closed_naming_it(ckpt: Path, where: str) -> None:
    histogram = Histogram([0.0, 1.0])
    index = replay_with(tag=histogram if where == "tag" else None)
    meta = index["groups"][0]["meta"]
    if where == "sample_ids":
        meta.sample_ids = histogram
    elif where == "meta":
        index["groups"][0]["meta"] = histogram
    elif where == "cleanup_staging_keys":
        meta.tags[0]["route_assembly_plan"]["cleanup_staging_keys"] = histogram
    write_replay_point(ckpt / "step_3", index)
    with pytest.raises(ReferenceSourceError, match=r"wandb\.sdk\.data_types\.histogram\.Histogram"):
        read(ckpt)


@pytest.mark.parametrize("runs", ["reduce", "build"])
def test_an_unknown_class_that_would_run_code_on_load_runs_nothing(
    ckpt: Path, tmp_path: Path, runs: str
) -> None:
    marker = tmp_path / "code-ran"
    evil = RunsCode(marker) if runs == "reduce" else WritesOnBuild(marker)
    index = replay_with(metrics={"reward": evil})
    with importable("nemo_rl_test_evil", WritesOnBuild=WritesOnBuild):
        write_replay_point(ckpt / "step_3", index)
        assert read(ckpt) == staging("route/5a") | {RowId(CANONICAL, "g5_g0")}
        assert not marker.exists()
        with nemo_modules():
            torch.load(ckpt / "step_3" / "replay_buffer_metadata.pt", weights_only=False)
        assert marker.is_dir()  # the same file unpickled in full runs the code


def test_the_key_cap_holds_through_inert_objects(ckpt: Path) -> None:
    index = replay_with(metrics={"reward": Histogram([0.0])})
    meta = index["groups"][0]["meta"]
    keys = ["k"] * 1000
    meta.tags[0]["route_assembly_plan"]["cleanup_staging_keys"] = keys
    index["groups"] = index["groups"] * 5000  # 5M keys through shared references, in a small file
    write_replay_point(ckpt / "step_3", index)
    with pytest.raises(ReferenceSourceError, match="names more than 4000000 staging keys"):
        read(ckpt)


def test_metrics_of_any_python_shape_are_inert(ckpt: Path) -> None:
    """Telemetry as it comes: numpy arrays and scalars, a defaultdict and a Counter (pickled with items
    set on the object after it is made), a set, a tensor."""
    metrics = {
        "reward": Histogram([0.0, 1.0]),
        "lengths": numpy.arange(4, dtype=numpy.int64),
        "mean": numpy.float32(0.5),
        "by_task": collections.defaultdict(list, {"math": [1, 2]}),
        "stops": collections.Counter({"eos": 3}),
        "tags": {"a", "b"},
        "tensor": torch.ones(2),
    }
    write_replay_point(ckpt / "step_3", replay_with(metrics=metrics))
    assert read(ckpt) == staging("route/5a") | {RowId(CANONICAL, "g5_g0")}


# -- ledger schema 4: two layouts, told apart by shape ---------------------------------------------------


def test_a_schema_4_sibling_lineage_ledger_keeps_each_siblings_sealed_current_attempts_keys(
    ckpt: Path,
) -> None:
    groups = [
        lineage_group_v4(
            "g1",
            [
                [attempt_v4("failed"), attempt_v4("sealed", ["s/1a", "s/1b"], rollout_id="g1_g0")],
                [attempt_v4("sealed", ["s/old"], rollout_id="g1_g1"), attempt_v4("dispatched")],
                [attempt_v4("sealed")],  # sealed without a receipt (a terminal capture failure): no keys
            ],
        )
    ]
    write_checkpoint(ckpt / "step_3", ledger_v4(groups))
    assert read(ckpt) == staging("s/1a", "s/1b")


def test_a_schema_4_prompt_reference_ledger_names_no_staging_rows(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", ledger_v4([prompt_group_v4("g1"), prompt_group_v4("g2")]))
    assert read(ckpt) == set()


@pytest.mark.parametrize(
    "state, message",
    [
        (
            ledger_v4(
                [prompt_group_v4("g1"), lineage_group_v4("g2", [[attempt_v4("sealed", ["k"], "g2_g0")]])]
            ),
            "mixes",
        ),
        ({**ledger_v4([]), "open_train_step": None}, "open_train_step"),
        (ledger_v4([{**prompt_group_v4("g1"), "status": "generating"}]), "neither"),
        (
            ledger_v4([{**lineage_group_v4("g1", [[attempt_v4("dispatched")]]), "canonical_meta": None}]),
            "neither",
        ),
        (
            ledger_v4([lineage_group_v4("g1", [[{**attempt_v4("failed"), "staging_keys": ["k"]}]])]),
            "keeps staging",
        ),
        (ledger_v4([lineage_group_v4("g1", [[attempt_v4("finalized")]])]), "status is 'finalized'"),
    ],
    ids=[
        "mixed",
        "schema-2-field",
        "prompt-group-with-status",
        "lineage-group-with-meta",
        "unsealed-keys",
        "status",
    ],
)
def test_a_schema_4_ledger_of_neither_layout_or_one_nemo_refuses_fails_closed(
    ckpt: Path, state: Any, message: str
) -> None:
    write_checkpoint(ckpt / "step_3", state)
    with pytest.raises(ReferenceSourceError, match=message):
        read(ckpt)


# -- a sealed attempt's receipt must be its own, as NeMo's loaders check ------------------------------------


@pytest.mark.parametrize("schema", [2, 4])
def test_a_sealed_receipt_of_another_attempt_is_refused_as_nemo_refuses_it(ckpt: Path, schema: int) -> None:
    if schema == 2:
        state = inventory({"g1": ["s/1"]})
        sealed = state["groups"][0]["siblings"][0]["attempts"][-1]
    else:
        state = ledger_v4([lineage_group_v4("g1", [[attempt_v4("sealed", ["s/1"])]])])
        sealed = state["groups"][0]["siblings"][0]["attempts"][-1]
    write_checkpoint(ckpt / "step_3", state)
    assert read(ckpt) == staging("s/1")  # the generator writes the identity NeMo derives
    sealed["receipt"]["rollout_id"] = "g1_g0_a" + "0" * 32
    write_checkpoint(ckpt / "step_3", state)
    with pytest.raises(ReferenceSourceError, match="receipt is another attempt's"):
        read(ckpt)
