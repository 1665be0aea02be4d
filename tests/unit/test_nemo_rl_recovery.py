"""The `nemo_rl_recovery` manifest format: NeMo RL's rollout_recovery.pt, read weights-only, checked
against its metadata's digest, failing closed on anything unknown; a checkpoint being written skips
the sweep."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tq_gc.cli import EXIT_SKIPPED, main
from tq_gc.collector import Collector
from tq_gc.config import ManifestSource, load_config, parse_config
from tq_gc.errors import CheckpointInProgress, ConfigError, ReferenceSourceError
from tq_gc.model import Cause, Outcome, RowId, rows_of
from tq_gc.references.manifests import ManifestsSource
from tq_gc.state.memory import ManualClock, MemoryState
from tq_gc.stores.memory import MemoryRowStore
from tq_gc.wiring import Runtime

from support.nemo_rl_checkpoints import (
    STAGING,
    RunsCode,
    attempt,
    cut_key,
    group,
    inventory,
    saved,
    write_checkpoint,
    write_truncated,
)

GRACE_S = 60
STEP3 = [cut_key("step_3", "g1_g0_a0", "call1", 0), cut_key("step_3", "g1_g0_a0", "call1", 1)]


def source(ckpt: Path, **extra: Any) -> ManifestSource:
    return ManifestSource(glob=f"{ckpt}/step_*/rollout_recovery.pt", format="nemo_rl_recovery", **extra)


def read(ckpt: Path, **extra: Any) -> set[RowId]:
    return rows_of(ManifestsSource([source(ckpt, **extra)]).read())


def staging(*keys: str) -> set[RowId]:
    return {RowId(STAGING, key) for key in keys}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    (tmp_path / "ckpt").mkdir()
    return tmp_path / "ckpt"


def test_a_committed_checkpoint_references_its_attempts_staging_keys(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    assert read(ckpt) == staging(*STEP3)


def test_every_committed_checkpoint_counts_and_the_partition_is_configurable(ckpt: Path) -> None:
    step4 = [cut_key("step_4", "g2_g1_a0", "call7", 0)]
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    write_checkpoint(ckpt / "step_4", inventory({"g2": step4}))
    assert read(ckpt) == staging(*STEP3, *step4)
    assert read(ckpt, partition="gym_staging") == {RowId("gym_staging", key) for key in STEP3 + step4}


def test_keys_of_every_attempt_are_taken_whatever_its_status(ckpt: Path) -> None:
    """NeMo RL keeps a sibling's last attempt's keys when it is sealed; a superset is the safe side."""
    odd = group(
        "g1", [[attempt("abandoned", ["a/1"]), attempt("sealed", ["b/1"])], [attempt("failed", ["c/1"])]]
    )
    write_checkpoint(ckpt / "step_3", {"schema_version": 2, "groups": [odd]})
    assert read(ckpt) == staging("a/1", "b/1", "c/1")


def test_without_metadata_there_is_no_digest_to_check(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}), metadata=False)
    write_checkpoint(ckpt / "step_4", inventory({"g1": ["x/1"]}), digest=None)
    assert read(ckpt) == staging(*STEP3, "x/1")


def test_a_wrong_digest_fails_the_source(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}), digest="0" * 64)
    with pytest.raises(
        ReferenceSourceError, match=r"step_3/rollout_recovery.pt: SHA-256 of the file is [0-9a-f]{64}"
    ):
        read(ckpt)


def test_a_file_changed_after_the_checkpoint_committed_fails_the_source(ckpt: Path) -> None:
    path = write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    path.write_bytes(saved(inventory({"g1": STEP3[:1]})))  # still a valid inventory, not the committed one
    with pytest.raises(ReferenceSourceError, match="not the one the checkpoint committed"):
        read(ckpt)


def test_a_truncated_file_fails_the_source(ckpt: Path) -> None:
    write_truncated(ckpt / "step_3", inventory({"g1": STEP3}))
    with pytest.raises(ReferenceSourceError, match="not a readable torch file"):
        read(ckpt)


@pytest.mark.parametrize("version", [3, 1, "2", 2.0, True, None])
def test_an_unknown_schema_version_fails_the_source(ckpt: Path, version: Any) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}, schema_version=version))
    with pytest.raises(ReferenceSourceError, match=r"schema_version is .* knows version 2 only"):
        read(ckpt)


def test_an_unknown_schema_version_in_the_metadata_fails_the_source(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    metadata = ckpt / "step_3" / "data_plane" / "metadata.json"
    doc = json.loads(metadata.read_text())
    doc["user_metadata"]["rollout_recovery_schema_version"] = 3
    metadata.write_text(json.dumps(doc))
    with pytest.raises(ReferenceSourceError, match="rollout_recovery_schema_version=3"):
        read(ckpt)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "must hold a JSON object"),
        ('{"user_metadata": "x"}', "user_metadata must be an object"),
        ('{"user_metadata": {"rollout_recovery_payload_sha256": "abc"}}', "not a SHA-256 hex digest"),
    ],
)
def test_malformed_metadata_fails_the_source(ckpt: Path, metadata: str, message: str) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / "step_3" / "data_plane" / "metadata.json").write_text(metadata)
    with pytest.raises(ReferenceSourceError, match=message):
        read(ckpt)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ([1, 2], "holds list, not the inventory's dict"),
        ({"schema_version": 2}, "groups is NoneType, not a list"),
        ({"schema_version": 2, "groups": ["g1"]}, r"groups\[0\] is str, not a dict"),
        ({"schema_version": 2, "groups": [{"siblings": {}}]}, r"groups\[0\].siblings is dict"),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("sealed", ["a"]) | {"status": "resumed"}]])],
            },
            r"groups\[0\].siblings\[0\].attempts\[0\].status is 'resumed'",
        ),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("sealed", ["a"]) | {"staging_keys": ["a", 7]}]])],
            },
            "staging_keys must be a list of key strings",
        ),
        (
            {
                "schema_version": 2,
                "groups": [group("g1", [[attempt("sealed", ["a"]) | {"staging_keys": None}]])],
            },
            "staging_keys must be a list of key strings",
        ),
    ],
    ids=[
        "not-a-dict",
        "no-groups",
        "group-not-a-dict",
        "siblings-not-a-list",
        "unknown-status",
        "key-not-a-string",
        "keys-missing",
    ],
)
def test_anything_unknown_in_the_inventory_fails_the_source(ckpt: Path, state: Any, message: str) -> None:
    write_checkpoint(ckpt / "step_3", state, digest=None)
    with pytest.raises(ReferenceSourceError, match=message):
        read(ckpt)


def test_an_inventory_is_never_unpickled_in_full(ckpt: Path, tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    state = inventory({"g1": STEP3}) | {"extra": RunsCode(marker)}
    path = write_checkpoint(ckpt / "step_3", state, digest=None)
    with pytest.raises(ReferenceSourceError, match=r"holds a Python object of (posix|os)\.mkdir"):
        read(ckpt)
    assert not marker.exists()
    # The same file, unpickled in full, runs the code: what the reader must never do.
    torch.load(path, weights_only=False)
    assert marker.is_dir()


def test_a_file_over_max_file_bytes_fails_the_source(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    with pytest.raises(ReferenceSourceError, match="over max_file_bytes=100"):
        read(ckpt, max_file_bytes=100)


@pytest.mark.parametrize("writing", ["tmp_step_4", "old_step_3", "step_4.tmp", "step_3.old"])
def test_a_checkpoint_being_written_makes_the_source_say_so(ckpt: Path, writing: str) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / writing).mkdir()  # a save that has written nothing yet is in progress all the same
    with pytest.raises(CheckpointInProgress, match=writing) as caught:
        read(ckpt)
    assert caught.value.directories == [str(ckpt / writing)]


@pytest.mark.parametrize("glob_directory", ["*", "**", "step_3"])
def test_in_progress_directories_are_found_whatever_the_glob_directory(
    ckpt: Path, glob_directory: str
) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / "step_3.tmp").mkdir()
    manifests = ManifestsSource(
        [ManifestSource(glob=f"{ckpt}/{glob_directory}/rollout_recovery.pt", format="nemo_rl_recovery")]
    )
    with pytest.raises(CheckpointInProgress):
        manifests.read()


def test_only_directories_named_like_a_save_in_progress_count(ckpt: Path) -> None:
    write_checkpoint(ckpt / "step_3", inventory({"g1": STEP3}))
    (ckpt / "tmp_step_4").write_text("a file, not a checkpoint directory")
    (ckpt / "logs.tmp").mkdir()  # beside the checkpoints, but not named like one (step_*)
    (ckpt / "tmp_").mkdir()
    assert read(ckpt) == staging(*STEP3)


def test_config_defaults_the_partition_and_refuses_a_key_path() -> None:
    assert ManifestSource(glob="/ckpt/*/rollout_recovery.pt", format="nemo_rl_recovery").partition == STAGING
    with pytest.raises(ConfigError, match=r"manifests\.0: a nemo_rl_recovery inventory names its rows"):
        parse_config(
            {
                "manifests": [
                    {"glob": "/c/*/rollout_recovery.pt", "format": "nemo_rl_recovery", "key_path": "x"}
                ]
            }
        )


# -- in a sweep ------------------------------------------------------------------------------------


class Job:
    """A NeMo RL job's staging partition on the memory store, its checkpoint volume, and tq-gc."""

    def __init__(self, tmp_path: Path) -> None:
        self.ckpt = tmp_path / "ckpt"
        self.ckpt.mkdir(exist_ok=True)
        self.clock = ManualClock()
        self.state = MemoryState("job-9", clock_ms=self.clock)
        self.rows = MemoryRowStore()
        self.values: dict[str, Any] = {
            "namespace": "job-9",
            "scope": [{"partition": STAGING, "prefixes": ["__generation_cut__/"]}],
            "grace_seconds": GRACE_S,
            "manifests": [{"glob": f"{self.ckpt}/step_*/rollout_recovery.pt", "format": "nemo_rl_recovery"}],
            "limits": {"fraction_min_rows": 0, "max_delete_fraction": 1.0},
        }

    def sweep(self, execute: bool = True) -> Any:
        collector = Collector(parse_config(self.values), self.state, self.rows, holder="test")
        return collector.sweep(dry_run=not execute)

    def observe_past_grace(self) -> None:
        """Let the grace pass while dry runs keep observing (a gap longer than the grace restarts clocks)."""
        for _ in range(2):
            self.clock.advance(GRACE_S * 0.55)
            self.sweep(execute=False)


def test_cut_rows_of_a_pruned_checkpoint_are_reclaimed_those_the_newest_lists_kept(tmp_path: Path) -> None:
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
    assert job.rows.keys(STAGING) == set(step4)
    assert report.counts.referenced["manifests"] == 1
    assert {row.key for row in report.deleted_sample} <= set(STEP3)


def test_a_checkpoint_being_written_skips_the_sweep_and_deletes_nothing(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.rows.put(STAGING, cut_key("step_2", "g0_g0_a0", "call1", 0))
    job.sweep()
    job.observe_past_grace()
    (job.ckpt / "tmp_step_3").mkdir()  # its inventory may list the row: not readable yet
    report = job.sweep()
    assert (report.outcome, report.cause) == (Outcome.SKIPPED, Cause.CHECKPOINT_IN_PROGRESS)
    assert "tmp_step_3" in (report.reason or "")
    assert job.rows.keys(STAGING) == {cut_key("step_2", "g0_g0_a0", "call1", 0)}
    (job.ckpt / "tmp_step_3").rename(job.ckpt / "step_3")  # committed, listing nothing of step_2
    assert job.sweep().counts.deleted == 1


def test_the_cli_exits_3_while_a_checkpoint_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(tmp_path)
    (job.ckpt / "step_5.old").mkdir()
    config = tmp_path / "gc.yaml"
    config.write_text(yaml.safe_dump(job.values))
    code = main(["sweep", "--config", str(config), "--execute", "--json"], Runtime(job.state, job.rows))
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["outcome"], doc["cause"]) == (EXIT_SKIPPED, "skipped", "checkpoint_in_progress")


def check(job: Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "gc.yaml"
    config.write_text(yaml.safe_dump(job.values))
    code = main(["check", "--config", str(config), "--json"], Runtime(job.state, job.rows))
    doc = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in doc["checks"] if c["name"].startswith("nemo_rl_recovery")}


def test_check_reports_checkpoints_rows_and_a_save_in_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(tmp_path)
    name = f"nemo_rl_recovery {job.ckpt}/step_*/rollout_recovery.pt"
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
    assert code == 2 and not found[name]["ok"] and "step_5/rollout_recovery.pt" in found[name]["detail"]


def test_the_nemo_rl_example_reads_recovery_inventories() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "nemo_rl.yaml"
    [manifest] = load_config(example, env={}).manifests
    assert (manifest.format, manifest.partition) == ("nemo_rl_recovery", STAGING)
    assert manifest.glob.endswith("/step_*/rollout_recovery.pt")
