"""Where NeMo RL's own restore refuses, so that it stops, the sweep fails closed: a step whose
`training_info.json` NeMo cannot load, a `step_N` that is not a directory, a bootstrap manifest no
config's restore accepts. The oracle of NeMo's restore refuses each too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tq_gc.errors import ReferenceSourceError
from tq_gc.rows import RowId

from support.nemo_rl_checkpoints import write_checkpoint, write_snapshot
from support.nemo_rl_data_plane import STAGING
from support.nemo_rl_ledgers import inventory
from support.nemo_rl_oracle import RestoreRefused, restore_keeps
from support.nemo_rl_reading import read, staging

# -- where NeMo's restore refuses, the sweep fails closed ---------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        lambda info: info.unlink(),
        lambda info: info.write_text("{"),
        lambda info: info.write_text("[3]"),
        lambda info: (info.unlink(), info.mkdir()),
    ],
    ids=["missing", "torn", "not-an-object", "a-directory"],
)
@pytest.mark.parametrize("with_snapshot", [False, True])
def test_a_step_whose_training_info_nemo_cannot_load_fails_closed(
    ckpt: Path, damage: Any, with_snapshot: bool
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    if with_snapshot:
        write_snapshot(ckpt / "step_3", 1, ["snap/1"])
    damage(ckpt / "step_3" / "training_info.json")
    with pytest.raises(ReferenceSourceError, match=r"step_3.*training_info\.json"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)


def test_a_step_that_is_not_a_directory_fails_closed(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g0": ["step/0"]}))
    (ckpt / "step_9").write_text("not a checkpoint")  # NeMo's newest step: its training info cannot load
    with pytest.raises(ReferenceSourceError, match=r"step_9.*not a directory"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)


def bootstrap_anchor(ckpt: Path, manifest: Any) -> Path:
    bootstrap = ckpt / "bootstrap"
    bootstrap.mkdir()
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (bootstrap / "manifest.json").write_text(text)
    write_snapshot(bootstrap, 1, ["boot/1"], schema_version=1, bootstrap_fingerprint="f" * 64)
    return bootstrap


AUGUST_ANCHOR = {
    "schema_version": 1,
    "base_train_step": 0,
    "trainer_version": 0,
    "bootstrap_fingerprint": "f" * 64,
}


@pytest.mark.parametrize(
    "manifest",
    [
        "{",
        [],
        {**AUGUST_ANCHOR, "base_train_step": 3},
        {**AUGUST_ANCHOR, "bootstrap_fingerprint": 7},
        {**AUGUST_ANCHOR, "bootstrap_fingerprint": None},  # NeMo records its config's digest, a string
        {**AUGUST_ANCHOR, "schema_version": 2},
        {**AUGUST_ANCHOR, "bootstrap_identity": {}},  # the newer layout's key in an August anchor
    ],
    ids=[
        "torn",
        "not-an-object",
        "step-3",
        "fingerprint-not-a-string",
        "no-fingerprint",
        "schema-2",
        "foreign-key",
    ],
)
def test_a_bootstrap_manifest_nemo_refuses_for_every_config_fails_closed(ckpt: Path, manifest: Any) -> None:
    bootstrap_anchor(ckpt, manifest)
    with pytest.raises(ReferenceSourceError, match=r"bootstrap.*manifest\.json"):
        read(ckpt)
    with pytest.raises(RestoreRefused):
        restore_keeps(ckpt)


@pytest.mark.parametrize("manifest", [AUGUST_ANCHOR, None], ids=["august-anchor", "no-manifest"])
def test_a_bootstrap_anchor_nemo_may_restore_protects_its_snapshots(ckpt: Path, manifest: Any) -> None:
    bootstrap_anchor(ckpt, manifest)  # none: NeMo's periodic saves write one for their config, restore it
    assert read(ckpt) == staging("boot/1") == {RowId(STAGING, key) for key in restore_keeps(ckpt)}
