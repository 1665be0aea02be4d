"""The `nemo_rl_recovery` source: every NeMo RL recovery point under the checkpoint directory, read as
NeMo RL's own restore reads it (ledger schema 2 and 3, the replay index, a snapshot's Gym state and
generation-cut proofs), without running any code of the files; anything NeMo's restore would refuse
fails the source, a save in progress skips the sweep, a pruned point releases its rows."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import yaml

from tools.testbed.clock import ManualClock
from tq_gc.cli import EXIT_SKIPPED, main
from tq_gc.config import ManifestSource, load_config, parse_config
from tq_gc.errors import CheckpointInProgress, ConfigError, ReferenceSourceError
from tq_gc.references import nemo_rl
from tq_gc.references.manifests import ManifestsSource
from tq_gc.report import Cause, Outcome
from tq_gc.rows import RowId, rows_of
from tq_gc.state.memory import MemoryState
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.sweep import Collector
from tq_gc.wiring import Runtime

from support.baseline import with_old_baseline
from support.nemo_rl_checkpoints import (
    RunsCode,
    snapshot_dir,
    write_checkpoint,
    write_point,
    write_training_info,
    write_truncated,
)
from support.nemo_rl_data_plane import CANONICAL, STAGING, KVBatchMeta, cut_key, saved
from support.nemo_rl_ledgers import (
    attempt,
    attempt_v3,
    expanding_ledger,
    finalized_group,
    group,
    group_v3,
    inventory,
    ledger_v3,
    sibling_history_v3,
)
from support.nemo_rl_snapshots import cut_proofs, gym_checkpoint, replay_index, snapshot_manifest

GRACE_S = 60
PASSED_OVER = r"passes over every committed rollout snapshot here \(snapshot_000001: "
STEP3 = [cut_key("step_3", "g1_g0_a0", "call1", 0), cut_key("step_3", "g1_g0_a0", "call1", 1)]


def source(ckpt: Path, **extra: Any) -> ManifestSource:
    return ManifestSource(glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery", **extra)


def read(ckpt: Path, **extra: Any) -> set[RowId]:
    return rows_of(ManifestsSource([source(ckpt, **extra)]).read())


def staging(*keys: str) -> set[RowId]:
    return {RowId(STAGING, key) for key in keys}


def canonical(*keys: str) -> set[RowId]:
    return {RowId(CANONICAL, key) for key in keys}


def metadata_of(point: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((point / "data_plane" / "metadata.json").read_text())
    return document


def rewrite_metadata(point: Path, **user_metadata: Any) -> None:
    document = metadata_of(point)
    document["user_metadata"].update(user_metadata)
    (point / "data_plane" / "metadata.json").write_text(json.dumps(document))


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    (tmp_path / "ckpt").mkdir()
    return tmp_path / "ckpt"


# -- schema 2 ----------------------------------------------------------------------------------------


def test_schema_2_keeps_sealed_current_attempts_and_finalized_groups_canonical_rows_and_route_plans(
    ckpt: Path,
) -> None:
    """NeMo's expected_staging_keys (rollout_recovery.py at 9355cc54, lines 306-332): before its canonical
    rows are published a group keeps its sealed attempts' staging rows; after, only those its canonical
    rows' route plans still need (finalization clears the rest)."""
    state = inventory({"g1": STEP3})
    state["groups"].append(finalized_group("g7", [["s/7a"], ["s/7b"]]))
    state["groups"].append(finalized_group("g8", [["s/8"]], status="claimed_for_training", route=["r/8"]))
    path = write_checkpoint(ckpt / "step_3", state)
    assert read(ckpt) == staging(*STEP3, "r/8") | canonical("g7_g0", "g7_g1", "g8_g0")
    # What the reader replaces: weights-only loading refuses NeMo's KVBatchMeta dataclass.
    with pytest.raises(pickle.UnpicklingError, match="KVBatchMeta"):
        torch.load(path, weights_only=True)


def test_schema_2_a_sibling_whose_current_attempt_is_not_sealed_keeps_nothing(ckpt: Path) -> None:
    retried = group("g1", [[attempt("failed"), attempt("dispatched")], [attempt("sealed", ["kept/1"])]])
    write_checkpoint(ckpt / "step_3", {"schema_version": 2, "groups": [retried], "open_train_step": None})
    assert read(ckpt) == staging("kept/1")


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ([1, 2], "holds list, not the ledger's dict"),
        ({"schema_version": 2}, "groups is NoneType, not a list"),
        ({"schema_version": 2, "groups": ["g1"]}, r"groups\[0\] is str, not a dict"),
        ({"schema_version": 2, "groups": [group("g1", [])]}, None),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("sealed", ["a"]) | {"status": "resumed"}]])],
            },
            r"groups\[0\]\.siblings\[0\]\.attempts\[0\]\.status is 'resumed'",
        ),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("sealed", ["a"]) | {"staging_keys": ["b"]}]])],
            },
            "differ from its receipt's manifest",
        ),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("abandoned") | {"staging_keys": ["a"]}]])],
            },
            "is abandoned yet keeps staging keys",
        ),
        (
            {"schema_version": 2, "groups": [group("g1", [[attempt("sealed", ["a"]) | {"receipt": None}]])]},
            "sealed without a receipt",
        ),
        (
            {"schema_version": 2, "groups": [group("g1", [[]])]},
            r"siblings\[0\]\.attempts is empty",
        ),
        (
            {"schema_version": 2, "groups": [group("g1", [[attempt("sealed", ["a"])]], status="finalized")]},
            "is finalized without canonical_meta",
        ),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("sealed", ["a"]) | {"staging_keys": ["a", 7]}]])],
            },
            "differ from its receipt's manifest",
        ),
    ],
    ids=[
        "not-a-dict",
        "no-groups",
        "group-not-a-dict",
        "no-siblings-is-fine",
        "unknown-status",
        "keys-not-the-receipts",
        "unsealed-with-keys",
        "sealed-without-receipt",
        "no-attempts",
        "finalized-without-meta",
        "key-not-a-string",
    ],
)
def test_a_schema_2_ledger_nemo_would_refuse_fails_the_source(
    ckpt: Path, state: Any, message: str | None
) -> None:
    write_checkpoint(ckpt / "step_3", state)
    if message is None:
        assert read(ckpt) == set()
        return
    with pytest.raises(ReferenceSourceError, match=message):
        read(ckpt)


def test_a_canonical_meta_of_another_class_fails_closed_unbuilt(ckpt: Path) -> None:
    state = inventory({"g1": STEP3})
    state["groups"][0]["canonical_meta"] = torch.nn.Identity()  # a real class, but not NeMo's KVBatchMeta
    write_checkpoint(ckpt / "step_3", state)
    with pytest.raises(
        ReferenceSourceError, match=r"canonical_meta is torch\.nn\.modules\.linear\.Identity, not"
    ):
        read(ckpt)


# -- schema 3 ----------------------------------------------------------------------------------------


def test_schema_3_keeps_the_sealed_current_attempts_keys(ckpt: Path) -> None:
    groups = [
        group_v3("g1", [sibling_history_v3("g1", 0, ["g1/a"]), [attempt_v3(0, "dispatched")]]),
        group_v3("g2", [[attempt_v3(0, "sealed")], [attempt_v3(0, "sealed", ["g2/b"], rollout_id="g2_g1")]]),
    ]
    write_point(ckpt / "step_5", ledger_v3(groups))
    assert read(ckpt) == staging("g1/a", "g2/b")  # a sealed attempt without a receipt holds no keys


def test_schema_3_of_the_branch_with_finalized_attempts_keeps_only_sealed_ones(ckpt: Path) -> None:
    def branch_attempt(status: str, keys: list[str], index: int) -> dict[str, Any]:
        gate = f"g1_g{index}_a{index}x"  # the gate id NeMo's loader derives, and checks the receipt against
        receipt = {"rollout_id": gate, "manifest": [{"staging_key": key} for key in keys]}
        return {
            "attempt_id": f"{index}x",
            "gate_rollout_id": gate,
            "status": status,
            "receipt": receipt if keys else None,
            "reward": 1.0 if keys else None,
            "staging_keys": keys,
        }

    siblings = [
        {
            "generation_index": 0,
            "logical_rollout_id": "g1_g0",
            "attempts": [branch_attempt("finalized", ["f/1"], 0)],
        },
        {
            "generation_index": 1,
            "logical_rollout_id": "g1_g1",
            "attempts": [branch_attempt("sealed", ["s/1"], 1)],
        },
    ]
    state = {
        "schema_version": 3,
        "staging_partition": STAGING,
        "groups": [{"group_id": "g1", "siblings": siblings}],
    }
    write_point(ckpt / "step_5", state)
    assert read(ckpt) == staging("s/1")


def test_files_staging_rows_in_another_partition_than_the_sources_fail_it(ckpt: Path) -> None:
    write_point(ckpt / "step_5", {"schema_version": 3, "staging_partition": "gym_staging", "groups": []})
    with pytest.raises(ReferenceSourceError, match="stage rows in partition 'gym_staging'"):
        read(ckpt)
    assert read(ckpt, partition="gym_staging") == set()
    write_point(
        ckpt / "step_5", ledger_v3([]), replay=replay_index({"g1": ["r/1"]})
    )  # plans say rollout_staging
    with pytest.raises(ReferenceSourceError, match="stage rows in partition 'rollout_staging'"):
        read(ckpt, partition="gym_staging")


@pytest.mark.parametrize("version", [1, 5, "3", 2.0, True, None])
def test_an_unknown_schema_version_fails_naming_the_version_and_the_file(ckpt: Path, version: Any) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}, schema_version=version), digest=None)
    (ckpt / "step_3" / "data_plane" / "metadata.json").write_text(json.dumps({"user_metadata": {}}))
    with pytest.raises(
        ReferenceSourceError, match=r"step_3: rollout_recovery.pt: schema_version is"
    ) as caught:
        read(ckpt)
    assert repr(version) in str(caught.value) or str(version) in str(caught.value)


def test_a_schema_2_ledger_under_number_4_is_refused(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}, schema_version=4))
    with pytest.raises(ReferenceSourceError, match="schema 4"):
        read(ckpt)


def test_the_metadatas_schema_version_must_be_the_files(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    rewrite_metadata(ckpt / "step_3", rollout_recovery_schema_version=3)
    with pytest.raises(ReferenceSourceError, match=r"is schema 2, but data_plane/metadata\.json records 3"):
        read(ckpt)


# -- snapshots: Gym state, generation-cut proofs, the replay index ----------------------------------------


def write_gym_snapshot(anchor: Path, sequence: int, schema_version: int = 5) -> Path:
    point = snapshot_dir(anchor, sequence)
    bootstrap = anchor.name == "bootstrap"  # its snapshots are of step 0, as NeMo's restore requires
    point.mkdir(parents=True)
    gym = gym_checkpoint(
        point, {"token_capture_staging": ["gym/tok1"], "generation_prefix_cut": ["gym/cut1"]}
    )
    proofs = (
        cut_proofs("ckpt-1", {"r0": ["cut/r0/0", "cut/r0/1"]}, failed=["r9"]) if schema_version == 5 else []
    )
    write_point(
        point,
        ledger_v3([group_v3("g4", [[attempt_v3(0, "sealed", ["ledger/4"], rollout_id="g4_g0")]])]),
        replay=replay_index({"g5": ["route/5a", "route/5b"]}),
        manifest=snapshot_manifest(schema_version, gym, proofs, base_train_step=0 if bootstrap else 3),
    )
    return point


@pytest.mark.parametrize("schema_version", [5, 6])
def test_a_snapshot_keeps_the_union_of_ledger_gym_cut_proof_and_route_plan_keys(
    ckpt: Path, schema_version: int
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    write_gym_snapshot(ckpt / "step_3", 2, schema_version)
    cuts = {"cut/r0/0", "cut/r0/1"} if schema_version == 5 else set()
    expected = {*STEP3, "ledger/4", "gym/tok1", "gym/cut1", "route/5a", "route/5b", *cuts}
    assert read(ckpt) == staging(*expected) | canonical("g5_g0")


def test_bootstrap_snapshots_count_and_a_trashed_one_releases_its_rows(ckpt: Path) -> None:
    write_gym_snapshot(ckpt / "bootstrap", 1)
    assert RowId(STAGING, "gym/tok1") in read(ckpt)
    snapshot_dir(ckpt / "bootstrap", 1).rename(snapshot_dir(ckpt / "bootstrap", 1, "trash_"))
    assert read(ckpt) == set()  # NeMo renames a pruned snapshot to trash_ before removing it


def test_the_glob_names_the_checkpoint_directory_and_nemos_layout_says_where_points_are(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    write_gym_snapshot(ckpt / "step_3", 1)
    write_checkpoint(ckpt / "copies" / "step_1", inventory({"g0": ["elsewhere/1"]}))  # not a NeMo point
    legacy = ManifestSource(glob=f"{ckpt}/step_*/rollout_recovery.pt", format="nemo_rl_recovery")
    assert rows_of(ManifestsSource([legacy]).read()) == read(ckpt)  # the old glob covers snapshots too
    assert RowId(STAGING, "gym/tok1") in read(ckpt)
    assert RowId(STAGING, "elsewhere/1") not in read(ckpt)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda p: (p / "gym/policy/storage_references.jsonl").write_text("{}\n"),
            "is 3 bytes, manifest.json says",
        ),
        (
            lambda p: (p / "gym/policy/manifest.json").write_text("{}"),
            r"SHA-256 is [0-9a-f]{64}, manifest.json records",
        ),
        (lambda p: (p / "gym/policy/manifest.json").unlink(), "manifest gym/policy/manifest.json is missing"),
        (lambda p: (p / "manifest.json").unlink(), PASSED_OVER + "missing or unreadable manifest"),
        (lambda p: (p / "manifest.json").write_text("{"), PASSED_OVER + "manifest.json is not"),
        (
            lambda p: edit_manifest(p, schema_version=7),
            PASSED_OVER + "unsupported rollout snapshot schema version 7",
        ),
        (lambda p: edit_manifest(p, schema_version=6), PASSED_OVER + "generation-cut proofs in schema 6"),
        (lambda p: edit_proofs(p, "durable_maybe"), "unknown prefix disposition 'durable_maybe'"),
        (lambda p: edit_index_path(p, "../../elsewhere.jsonl"), "is not safely relative"),
        (lambda p: (p / "replay_buffer_metadata.pt").unlink(), "but replay_buffer_metadata.pt is missing"),
        (
            lambda p: rewrite_metadata(p, replay_manifest_digest="other"),
            "not the replay index this checkpoint",
        ),
        (
            lambda p: rewrite_metadata(p, replay_group_count=5),
            "holds 1 groups, data_plane/metadata.json records 5",
        ),
    ],
    ids=[
        "index-size",
        "participant-digest",
        "participant-missing",
        "manifest-missing",
        "manifest-not-json",
        "snapshot-schema-unknown",
        "proofs-in-schema-6",
        "unknown-disposition",
        "escaping-path",
        "replay-missing",
        "replay-digest",
        "replay-count",
    ],
)
def test_a_snapshot_nemo_would_refuse_fails_the_source(ckpt: Path, damage: Any, message: str) -> None:
    point = write_gym_snapshot(ckpt / "bootstrap", 1)
    damage(point)
    with pytest.raises(ReferenceSourceError, match=message):
        read(ckpt)


def edit_manifest(point: Path, **fields: Any) -> None:
    manifest = json.loads((point / "manifest.json").read_text())
    manifest.update(fields)
    (point / "manifest.json").write_text(json.dumps(manifest))


def edit_proofs(point: Path, disposition: str) -> None:
    manifest = json.loads((point / "manifest.json").read_text())
    manifest["gym_generation_cut_proofs"][0]["workers"][0]["generation_cut_receipt"]["prefixes"][0][
        "disposition"
    ] = disposition
    (point / "manifest.json").write_text(json.dumps(manifest))


def edit_index_path(point: Path, path: str) -> None:
    manifest = json.loads((point / "manifest.json").read_text())
    manifest["gym_checkpoint"]["participants"][0]["payload"]["storage_reference_index"]["relative_path"] = (
        path
    )
    (point / "manifest.json").write_text(json.dumps(manifest))


# -- files advertised, missing, damaged; saves in progress ---------------------------------------------------


def test_a_committed_checkpoint_advertising_a_missing_ledger_fails_closed(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / "step_3" / "rollout_recovery.pt").unlink()
    with pytest.raises(ReferenceSourceError, match=r"advertises rollout_recovery\.pt, which is missing"):
        read(ckpt)


def test_a_checkpoint_without_recovery_state_holds_nothing(ckpt: Path) -> None:
    write_point(ckpt / "step_3")  # data plane saved in shadow mode, no ledger: nothing to keep
    (ckpt / "step_4").mkdir()  # a trainer checkpoint without a data plane at all
    write_training_info(ckpt / "step_4", current_step=4)
    assert read(ckpt) == set()


def test_a_ledger_without_its_metadata_is_a_save_in_progress(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}), metadata=False)
    with pytest.raises(CheckpointInProgress, match="step_3"):
        read(ckpt)


@pytest.mark.parametrize(
    "writing",
    [
        "tmp_step_4",
        "old_step_3",
        "step_3/rollout_snapshots/tmp_snapshot_000002",
        "bootstrap/rollout_snapshots/tmp_snapshot_000001",
    ],
)
def test_a_save_being_written_makes_the_source_say_so(ckpt: Path, writing: str) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / writing).mkdir(parents=True)  # a save that has written nothing yet is in progress all the same
    with pytest.raises(CheckpointInProgress, match=writing.rsplit("/", 1)[-1]) as caught:
        read(ckpt)
    assert caught.value.directories == [str(ckpt / writing)]


def test_only_directories_named_as_nemo_names_a_save_count(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / "tmp_step_4").write_text("a file, not a checkpoint directory")
    for name in ("logs.tmp", "tmp_", "tmp_other", "step_3/data_plane/tmp_shard"):
        (ckpt / name).mkdir()
    assert read(ckpt) == staging(*STEP3)


def test_a_wrong_digest_or_a_file_changed_after_the_commit_fails_the_source(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}), digest="0" * 64)
    with pytest.raises(ReferenceSourceError, match=r"step_3: rollout_recovery.pt: SHA-256 is [0-9a-f]{64}"):
        read(ckpt)
    path = write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    path.write_bytes(saved(inventory({"g1": STEP3[:1]})))  # still a valid ledger, not the committed one
    with pytest.raises(ReferenceSourceError, match="not the one the checkpoint committed"):
        read(ckpt)


def test_a_truncated_file_fails_the_source(ckpt: Path) -> None:
    write_truncated(ckpt / "step_3", inventory({"g1": STEP3}))
    with pytest.raises(ReferenceSourceError, match=r"not a torch\.save zip archive"):
        read(ckpt)


def test_a_missing_checkpoint_directory_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(ReferenceSourceError, match="is the checkpoint volume mounted"):
        read(tmp_path / "not-mounted")


class SmallFiles(ManifestSource):
    """A manifest source whose file cap is 100 bytes (tq-gc's is 64 MiB, fixed)."""

    max_file_bytes: ClassVar[int] = 100


def test_a_file_over_max_file_bytes_fails_the_source(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    small = SmallFiles(glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery")
    with pytest.raises(ReferenceSourceError, match="over the 100-byte limit"):
        ManifestsSource([small]).read()


# -- loading never runs code, and is bounded ----------------------------------------------------------------


def test_a_file_is_never_unpickled_in_full(ckpt: Path, tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    state = inventory({"g1": STEP3}) | {"extra": RunsCode(marker)}
    path = write_checkpoint(ckpt / "step_3", state)
    assert read(ckpt) == staging(*STEP3)  # "extra" names no rows: its object stays an inert record
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the same file unpickled in full runs the code
    assert marker.is_dir()


def test_a_file_naming_billions_of_keys_through_shared_references_fails_fast(ckpt: Path) -> None:
    path = write_point(ckpt / "step_3", expanding_ledger(fan_out=3000))  # 3000**2 * 100 keys
    assert path.stat().st_size < 100_000
    with pytest.raises(ReferenceSourceError, match="names more than 4000000 staging keys"):
        read(ckpt)


def test_a_data_pickle_that_would_expand_past_the_file_is_refused(ckpt: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps([""] * 1_000_000, protocol=2))
    write_checkpoint(ckpt / "step_3", None, payload=buffer.getvalue())
    with pytest.raises(ReferenceSourceError, match="would expand"):
        read(ckpt)


@pytest.mark.parametrize("pickled", [b"garbage", b"\x80\x02h\x07.", pickle.dumps({1: 2}, protocol=2)[:-1]])
def test_a_broken_pickle_in_a_torch_zip_fails_the_source(ckpt: Path, pickled: bytes) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
    write_checkpoint(ckpt / "step_3", None, payload=buffer.getvalue())
    with pytest.raises(ReferenceSourceError, match="its pickle is broken"):
        read(ckpt)


def test_a_legacy_torch_file_is_refused(ckpt: Path) -> None:
    buffer = io.BytesIO()
    torch.save(inventory({"g1": STEP3}), buffer, _use_new_zipfile_serialization=False)
    write_checkpoint(ckpt / "step_3", None, payload=buffer.getvalue())
    with pytest.raises(ReferenceSourceError, match=r"not a torch\.save zip archive"):
        read(ckpt)


def test_the_allow_list_is_exactly_nemos_ledger_classes_and_protocol_2s_helpers() -> None:
    expected = {
        "nemo_rl.data_plane.interfaces.KVBatchMeta",
        "_codecs.encode",
        "builtins.bytes",
        "__builtin__.bytes",
        "collections.OrderedDict",
        "torch._utils._rebuild_tensor_v2",
        *(
            f"torch.{name}Storage"
            for name in (
                "Float",
                "Double",
                "Half",
                "BFloat16",
                "Long",
                "Int",
                "Short",
                "Char",
                "Byte",
                "Bool",
            )
        ),
    }
    allowed = nemo_rl.ALLOWED_GLOBALS
    assert allowed == expected


def test_tensors_ride_along_unread(ckpt: Path) -> None:
    state = inventory({"g1": STEP3})
    state["groups"][0]["siblings"][0]["attempts"][1]["receipt"]["logprobs"] = torch.ones(3)
    write_checkpoint(ckpt / "step_3", state)
    assert read(ckpt) == staging(*STEP3)


def test_an_empty_bytes_value_and_kv_batch_meta_tensors_read(ckpt: Path) -> None:
    meta = KVBatchMeta(
        partition_id=CANONICAL, task_name=None, sample_ids=["g9_g0"], tags=[{"w": torch.tensor(1)}]
    )
    state = {"schema_version": 2, "groups": [finalized_group("g9", [["k/9"]]) | {"canonical_meta": meta}]}
    state["groups"][0]["prompt_payload_sha256"] = b""  # pickled as bytes(): a field the reader skips
    write_checkpoint(ckpt / "step_3", state)
    assert read(ckpt) == canonical("g9_g0")  # published: its sealed staging row is finalization's to clear


# -- config ------------------------------------------------------------------------------------------------


def test_config_defaults_the_partition_and_refuses_a_key_path_or_another_file_name() -> None:
    assert ManifestSource(glob="/ckpt/**/rollout_recovery.pt", format="nemo_rl_recovery").partition == STAGING
    for extra, message in [
        ({"key_path": "x"}, "names its rows itself"),
        ({}, "names the rollout_recovery.pt"),
    ]:
        glob = "/c/**/rollout_recovery.pt" if extra else "/c/**/*.pt"
        with pytest.raises(ConfigError, match=message):
            parse_config({"manifests": [{"glob": glob, "format": "nemo_rl_recovery", **extra}]})


# -- in a sweep ----------------------------------------------------------------------------------------------


class Job:
    """A NeMo RL job's staging partition on the memory store, its checkpoint volume, and tq-gc."""

    def __init__(self, tmp_path: Path) -> None:
        self.ckpt = tmp_path / "ckpt"
        self.ckpt.mkdir(exist_ok=True)
        self.clock = ManualClock()
        self.state = with_old_baseline(MemoryState("job-9", clock_ms=self.clock))
        self.rows = MemoryRowStore()
        self.values: dict[str, Any] = {
            "namespace": "job-9",
            "scope": [{"partition": STAGING, "prefixes": ["__generation_cut__/"]}],
            "grace_seconds": GRACE_S,
            "manifests": [{"glob": f"{self.ckpt}/**/rollout_recovery.pt", "format": "nemo_rl_recovery"}],
            "limits": {"max_delete_fraction": 1.0},
        }

    def sweep(self, execute: bool = True) -> Any:
        collector = Collector(parse_config(self.values), self.state, self.rows, holder="test")
        return collector.sweep(dry_run=not execute)

    def observe_past_grace(self) -> None:
        """Let the grace pass while dry runs keep observing (a gap longer than the grace restarts clocks)."""
        for _ in range(2):
            self.clock.advance(GRACE_S * 0.55)
            self.sweep(execute=False)


def test_cut_rows_of_a_pruned_checkpoint_are_reclaimed_those_the_newest_keeps_stay(tmp_path: Path) -> None:
    job = Job(tmp_path)
    step4 = [cut_key("step_4", "g2_g0_a1", "call2", 0)]
    for key in STEP3 + step4:
        job.rows.put(STAGING, key, {"rollout_id": key.split("/")[2]})
    write_checkpoint(job.ckpt / "step_3", inventory({"g1": STEP3}))
    write_checkpoint(job.ckpt / "step_4", inventory({"g2": step4}))
    job.sweep()
    job.observe_past_grace()
    assert job.sweep().counts.referenced["manifests"] == 3
    shutil.rmtree(job.ckpt / "step_3")  # keep_top_k prunes the older checkpoint
    job.sweep()
    job.observe_past_grace()
    report = job.sweep()
    assert (report.outcome, job.rows.keys(STAGING)) == (Outcome.COMPLETED, set(step4))
    assert {row.key for row in report.deleted_sample} == set(STEP3)


def test_a_save_being_written_skips_the_sweep_and_deletes_nothing(tmp_path: Path) -> None:
    job = Job(tmp_path)
    orphan = cut_key("step_2", "g0_g0_a0", "call1", 0)
    job.rows.put(STAGING, orphan)
    job.sweep()
    job.observe_past_grace()
    writing = snapshot_dir(job.ckpt / "bootstrap", 1, "tmp_")
    writing.mkdir(parents=True)  # its TQ save may be running, its manifest may name the row
    report = job.sweep()
    assert (report.outcome, report.cause) == (Outcome.SKIPPED, Cause.CHECKPOINT_IN_PROGRESS)
    assert "tmp_snapshot_000001" in (report.reason or "")
    assert job.rows.keys(STAGING) == {orphan}
    writing.rename(snapshot_dir(job.ckpt / "bootstrap", 1))  # committed, keeping nothing of step_2
    write_point(snapshot_dir(job.ckpt / "bootstrap", 1), ledger_v3([]), manifest=snapshot_manifest(6))
    assert job.sweep().counts.deleted == 1


def test_the_cli_exits_3_while_a_checkpoint_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(tmp_path)
    (job.ckpt / "old_step_5").mkdir()
    config = tmp_path / "gc.yaml"
    config.write_text(yaml.safe_dump(job.values))
    code = main(["sweep", "--config", str(config), "--execute", "--json"], Runtime(job.state, job.rows))
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["outcome"], doc["cause"]) == (EXIT_SKIPPED, "skipped", "checkpoint_in_progress")


def check(job: Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "gc.yaml"
    config.write_text(yaml.safe_dump(job.values))
    job.rows.put(STAGING, "not-in-scope")  # the job has written its staging partition (check fails before)
    code = main(["check", "--config", str(config), "--json"], Runtime(job.state, job.rows))
    doc = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in doc["checks"] if c["name"].startswith("nemo_rl_recovery")}


def test_check_reports_recovery_points_rows_and_a_save_in_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(tmp_path)
    name = f"nemo_rl_recovery {job.ckpt}/**/rollout_recovery.pt"
    write_checkpoint(job.ckpt / "step_3", inventory({"g1": STEP3}))
    write_checkpoint(job.ckpt / "step_4", inventory({"g2": ["a/1"]}))
    code, found = check(job, tmp_path, capsys)
    assert code == 0 and found[name]["ok"]
    assert (
        found[name]["detail"] == "2 committed checkpoint(s) (step_3, step_4), 3 rows named in rollout_staging"
    )
    (job.ckpt / "tmp_step_5").mkdir()
    code, found = check(job, tmp_path, capsys)
    assert code == 0 and found[name]["ok"] and "tmp_step_5): sweeps skip" in found[name]["detail"]
    shutil.rmtree(job.ckpt / "tmp_step_5")
    write_truncated(job.ckpt / "step_5", inventory({"g3": ["b/1"]}))
    code, found = check(job, tmp_path, capsys)
    assert code == 2 and not found[name]["ok"] and "step_5: rollout_recovery.pt" in found[name]["detail"]


def test_the_nemo_rl_example_reads_every_recovery_point() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "nemo_rl.yaml"
    [manifest] = load_config(example, env={}).manifests
    assert (manifest.format, manifest.partition) == ("nemo_rl_recovery", STAGING)
    assert manifest.glob == "/checkpoints/**/rollout_recovery.pt"
