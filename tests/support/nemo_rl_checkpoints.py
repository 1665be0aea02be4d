"""NeMo RL recovery points as NeMo RL writes them (NVIDIA-NeMo/RL, read 2026-12), for tests of the
`nemo_rl_recovery` source: written from the documented structures with torch.save, never from NeMo's code.

Under `checkpointing.checkpoint_dir`:

    step_N/                                 trainer checkpoint (tmp_step_N while written)
    step_N/rollout_snapshots/snapshot_NNNNNN/   periodic snapshot (tmp_snapshot_, trash_snapshot_)
    bootstrap/rollout_snapshots/snapshot_NNNNNN/

each holding `rollout_recovery.pt` (the ledger: schema 2, August branches, or schema 3), the TQ
save's `data_plane/metadata.json` (`user_metadata` names the ledger's SHA-256 and schema version, and the
replay index's digest when authoritative), `replay_buffer_metadata.pt` (canonical groups as `KVBatchMeta`
dataclasses whose tags carry route plans), and for a snapshot `manifest.json` (schema 4-6) with NeMo
Gym's participant state (digest-bound JSON-lines storage reference indexes) and generation-cut proofs.

`KVBatchMeta` is pickled under NeMo's own name, `nemo_rl.data_plane.interfaces.KVBatchMeta`, so a
file holds exactly what NeMo's does; loading it back needs `nemo_modules()` (the tests' oracle does).
The parts are built by nemo_rl_data_plane.py (partitions, cut keys, KVBatchMeta), nemo_rl_ledgers.py
(the ledgers) and nemo_rl_snapshots.py (replay index, Gym state, snapshot manifests); this module writes
recovery points of them.

Also ledger schema 4 in both layouts, the August branch's snapshots (manifest schema 1, COMMITTED,
LATEST, plain-delete pruning), a bootstrap anchor with snapshots of schema 4-6, and `tmp_`, `old_`,
`trash_` directories. Also what must fail or skip: truncated files, wrong digests, missing advertised
files, unknown schema versions, a pickle that would run code, one that names billions of keys through
shared references.

    python tests/support/nemo_rl_checkpoints.py OUT_DIR   writes one of each under OUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (above): its sibling modules are support.*
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.nemo_rl_data_plane import CANONICAL, cut_key, saved
from support.nemo_rl_ledgers import (
    SCHEMA_VERSION,
    attempt_v4,
    expanding_ledger,
    finalized_group,
    group_v3,
    inventory,
    ledger_v3,
    ledger_v4,
    lineage_group_v4,
    prompt_group_v4,
    sibling_history_v3,
)
from support.nemo_rl_snapshots import cut_proofs, gym_checkpoint, replay_index, snapshot_manifest

INVENTORY = "rollout_recovery.pt"
REPLAY = "replay_buffer_metadata.pt"


# ---- writing recovery points ------------------------------------------------------------------------------


def write_point(
    directory: Path,
    ledger: Any = None,
    *,
    digest: str | None = "auto",
    metadata: bool = True,
    payload: bytes | None = None,
    replay: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
) -> Path:
    """One recovery point, as NeMo writes it: the ledger, the TQ save's metadata (digest="auto" records
    the ledger's real SHA-256, None none, any other string as is), the replay index, the manifest; a
    `step_N` (or its tmp_ or old_ copy) also gets the `training_info.json` NeMo's CheckpointManager
    writes into every step."""
    directory.mkdir(parents=True, exist_ok=True)
    if step := re.fullmatch(r"(?:tmp_|old_)?step_(\d+)", directory.name):  # written before the rename
        write_training_info(directory, current_step=int(step.group(1)))
    user_metadata: dict[str, Any] = {"data_plane_checkpoint_schema_version": 1, "partition_id": CANONICAL}
    user_metadata["mode"] = "authoritative" if replay is not None else "shadow"
    if ledger is not None or payload is not None:
        content = saved(ledger) if payload is None else payload
        (directory / INVENTORY).write_bytes(content)
        version = ledger.get("schema_version") if isinstance(ledger, dict) else SCHEMA_VERSION
        user_metadata["rollout_recovery_schema_version"] = version
        if digest is not None:
            recorded = hashlib.sha256(content).hexdigest() if digest == "auto" else digest
            user_metadata["rollout_recovery_payload_sha256"] = recorded
            user_metadata["rollout_recovery_group_count"] = (
                len(ledger.get("groups", [])) if isinstance(ledger, dict) else 0
            )
    if replay is not None:
        (directory / REPLAY).write_bytes(saved(replay))
        user_metadata["replay_metadata_schema_version"] = 1
        user_metadata["replay_manifest_digest"] = replay["manifest_digest"]
        user_metadata["replay_group_count"] = len(replay["groups"])
    if manifest is not None:
        (directory / "manifest.json").write_text(json.dumps(manifest))
    if metadata:
        (directory / "data_plane").mkdir(exist_ok=True)
        (directory / "data_plane" / "metadata.json").write_text(
            json.dumps({"format_version": 1, "user_metadata": user_metadata})
        )
    return directory / INVENTORY


def write_training_info(step: Path, **fields: Any) -> None:
    """The resume state NeMo's restore loads first (its `current_step` and `trainer_version` name the
    lineage a snapshot must belong to)."""
    (step / "training_info.json").write_text(json.dumps({"consumed_samples": 0, **fields}))


def write_checkpoint(
    directory: Path,
    state: Any,
    *,
    digest: str | None = "auto",
    metadata: bool = True,
    payload: bytes | None = None,
) -> Path:
    """A trainer checkpoint holding only a ledger (and its metadata)."""
    return write_point(directory, state, digest=digest, metadata=metadata, payload=payload)


def write_snapshot(
    anchor: Path,
    sequence: int,
    keys: list[str],
    *,
    schema_version: int = 6,
    committed: bool = True,
    **manifest_fields: Any,
) -> Path:
    """A snapshot of `anchor` whose ledger keeps `keys`; schema 1 is the August layout (COMMITTED file
    written before the rename, then the LATEST pointer), 4-6 the newer one (no COMMITTED file)."""
    point = snapshot_dir(anchor, sequence)
    bootstrap = anchor.name == "bootstrap"
    manifest = snapshot_manifest(schema_version, None, (), base_train_step=0 if bootstrap else 3)
    if schema_version == 1:
        manifest = {name: manifest[name] for name in AUGUST_MANIFEST_FIELDS}
    manifest.update(manifest_fields)
    write_point(point, inventory({f"g{sequence}": keys}), manifest=manifest)
    if schema_version == 1 and committed:
        (point / "COMMITTED").write_text("committed\n")
        (point.parent / "LATEST").write_text(point.name + "\n")
    return point


AUGUST_MANIFEST_FIELDS = (
    "schema_version",
    "base_train_step",
    "trainer_version",
    "current_epoch",
    "mutation_version",
    "rolled_back_train_group_count",
    "bootstrap_fingerprint",
)


def snapshot_dir(anchor: Path, sequence: int, stage: str = "") -> Path:
    """`anchor/rollout_snapshots/{stage}snapshot_NNNNNN` (stage "", "tmp_" or "trash_")."""
    return anchor / "rollout_snapshots" / f"{stage}snapshot_{sequence:06d}"


def write_truncated(directory: Path, state: Any) -> Path:
    """A save cut short (disk full, a killed writer): half the bytes, no digest to catch it."""
    content = saved(state)
    return write_checkpoint(directory, state, digest=None, payload=content[: len(content) // 2])


class RunsCode:
    """Unpickled in full, this would create `marker` (a directory): the reader must refuse it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def main(out: Path) -> None:
    keys = {"g1": [cut_key("step_3", "g1_g0_a0", "call1", 0), cut_key("step_3", "g1_g0_a0", "call1", 1)]}
    write_checkpoint(
        out / "schema2" / "step_3", {**inventory(keys), "groups": [finalized_group("g9", [["s/9"]])]}
    )
    write_point(
        out / "schema3" / "step_3", ledger_v3([group_v3("g1", [sibling_history_v3("g1", 0, ["s/1"])])])
    )
    snapshot = snapshot_dir(out / "schema3" / "step_3", 1)
    write_point(
        snapshot,
        ledger_v3([]),
        replay=replay_index({"g2": ["route/2"]}),
        manifest=snapshot_manifest(
            5,
            gym_checkpoint(snapshot, {"token_capture_staging": ["gym/1"]}),
            cut_proofs("c1", {"r1": ["cut/1"]}),
            3,
        ),
    )
    write_checkpoint(out / "wrong_digest" / "step_3", inventory(keys), digest="0" * 64)
    write_checkpoint(out / "unknown_schema" / "step_3", inventory(keys, schema_version=4))
    write_truncated(out / "truncated" / "step_3", inventory(keys))
    write_point(out / "expanding" / "step_3", expanding_ledger())
    write_checkpoint(out / "in_progress" / "tmp_step_4", inventory(keys))
    write_checkpoint(out / "swapping" / "old_step_4", inventory(keys))
    write_point(
        out / "schema4_lineage" / "step_3",
        ledger_v4([lineage_group_v4("g1", [[attempt_v4("sealed", ["s/4"], "g1_g0")]])]),
    )
    write_point(out / "schema4_prompts" / "step_3", ledger_v4([prompt_group_v4("g1")]))
    write_august_snapshots(out / "august" / "step_3", 3, keep_latest_k=2)
    bootstrap = out / "bootstrap" / "bootstrap"
    bootstrap.mkdir(parents=True)
    (bootstrap / "manifest.json").write_text(json.dumps(BOOTSTRAP_ANCHOR))
    for schema_version in (4, 5, 6):
        point = snapshot_dir(bootstrap, schema_version)
        write_point(
            point,
            ledger_v3([]),
            manifest=snapshot_manifest(
                schema_version, gym_checkpoint(point, {"token_capture_staging": [f"gym/{schema_version}"]})
            ),
        )
    write_point(out / "snapshot_in_progress" / "step_3")
    snapshot_dir(out / "snapshot_in_progress" / "step_3", 2, "tmp_").mkdir(parents=True)
    snapshot_dir(bootstrap, 1, "trash_").mkdir()
    print(f"wrote NeMo RL recovery points under {out}")


BOOTSTRAP_ANCHOR = {
    "schema_version": 6,
    "base_train_step": 0,
    "trainer_version": 0,
    "bootstrap_fingerprint": "f" * 64,
}
AUGUST_MANIFEST = {
    "schema_version": 1,
    "trainer_version": 0,
    "current_epoch": 0,
    "mutation_version": 1,
    "rolled_back_train_group_count": 0,
    "bootstrap_fingerprint": None,
}


def write_august_snapshots(step: Path, count: int, keep_latest_k: int) -> None:
    """`step` with `count` snapshots as the August branch commits them (files, COMMITTED, rename, LATEST,
    then the oldest beyond `keep_latest_k` removed by plain delete): ledger schema 2, manifest schema 1."""
    number = int(step.name.removeprefix("step_"))
    write_checkpoint(step, inventory({"g0": [f"s/{number}"]}))
    for sequence in range(1, count + 1):
        tmp = snapshot_dir(step, sequence, "tmp_")
        write_point(
            tmp,
            inventory({f"g{sequence}": [f"snap/{sequence}"]}),
            manifest={**AUGUST_MANIFEST, "base_train_step": number, "trainer_version": number},
        )
        (tmp / "COMMITTED").write_text("committed\n")
        tmp.rename(snapshot_dir(step, sequence))
        (tmp.parent / "LATEST").write_text(f"{snapshot_dir(step, sequence).name}\n")
        for stale in range(1, sequence - keep_latest_k + 1):
            shutil.rmtree(snapshot_dir(step, stale), ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
