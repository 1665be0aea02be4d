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

`KVBatchMeta` below is pickled under NeMo's own name, `nemo_rl.data_plane.interfaces.KVBatchMeta`, so a
file holds exactly what NeMo's does; loading it back needs `nemo_modules()` (the tests' oracle does).

Also what must fail or skip: truncated files, wrong digests, missing advertised files, unknown schema
versions, a pickle that would run code, one that names billions of keys through shared references.

    python tests/support/nemo_rl_checkpoints.py OUT_DIR   writes one of each under OUT_DIR
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
import types
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 2
INVENTORY = "rollout_recovery.pt"
REPLAY = "replay_buffer_metadata.pt"
STAGING = "rollout_staging"
CANONICAL = "rollout_data"
NEMO_MODULE = "nemo_rl.data_plane.interfaces"


@dataclasses.dataclass
class KVBatchMeta:
    """NeMo RL's data-plane batch metadata (nemo_rl/data_plane/interfaces.py), field for field."""

    partition_id: str
    task_name: str | None
    sample_ids: list[str]
    fields: list[str] | None = None
    sequence_lengths: list[int] | None = None
    extra_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    tags: list[dict[str, Any]] | None = None


KVBatchMeta.__module__ = NEMO_MODULE


@contextlib.contextmanager
def nemo_modules() -> Iterator[None]:
    """`nemo_rl.data_plane.interfaces` importable (holding KVBatchMeta) while inside: pickle finds a class
    by its module and name, to write it and to read it back."""
    names = ["nemo_rl", "nemo_rl.data_plane", NEMO_MODULE]
    saved_modules = {name: sys.modules.get(name) for name in names}
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    sys.modules[NEMO_MODULE].KVBatchMeta = KVBatchMeta  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def saved(state: Any) -> bytes:
    buffer = io.BytesIO()
    with nemo_modules():
        torch.save(state, buffer)
    return buffer.getvalue()


def cut_key(checkpoint: str, rollout: str, call: str, seq: int) -> str:
    """A generation-cut chunk row: `__generation_cut__/{checkpoint_id}/{rollout_id}/{model_call_id}/{seq}`."""
    return f"__generation_cut__/{checkpoint}/{rollout}/{call}/{seq}"


# ---- schema 2 ------------------------------------------------------------------------------------------


def attempt(status: str, staging_keys: Sequence[str] = (), rollout_id: str = "") -> dict[str, Any]:
    """A schema-2 attempt; a sealed one carries a receipt naming its keys (others carry none)."""
    sealed = status == "sealed"
    return {
        "attempt_uuid": uuid.uuid4().bytes,
        "status": status,
        "receipt": (
            {"rollout_id": rollout_id, "manifest": [{"staging_key": key} for key in staging_keys]}
            if sealed
            else None
        ),
        "reward": 1.0 if sealed else None,
        "staging_keys": list(staging_keys),
    }


def group(
    group_id: str,
    attempts_per_sibling: Sequence[Sequence[dict[str, Any]]],
    *,
    status: str = "generating",
    canonical_meta: KVBatchMeta | None = None,
) -> dict[str, Any]:
    finalized = canonical_meta is not None
    return {
        "group_id": group_id,
        "prompt_id": "70",
        "prompt_ref": {"sample_id": "70", "task_name": "nemo_gym"},
        "expected_generations": len(attempts_per_sibling),
        "target_step": 3,
        "start_weight_version": 3,
        "status": status,
        "canonical_meta": canonical_meta,
        "group_min_weight_version": 3 if finalized else None,
        "group_max_weight_version": 3 if finalized else None,
        "claimed_train_step": 4 if status in ("claimed_for_training", "applied_uncheckpointed") else None,
        "siblings": [
            {"generation_index": index, "attempts": list(attempts)}
            for index, attempts in enumerate(attempts_per_sibling)
        ],
    }


def finalized_group(
    group_id: str, keys_per_sibling: Sequence[Sequence[str]], status: str = "finalized"
) -> dict[str, Any]:
    """A schema-2 group whose siblings are sealed and whose canonical rows are published: its
    canonical_meta is a KVBatchMeta dataclass (what weights-only loading refuses)."""
    sample_ids = [f"{group_id}_g{index}" for index in range(len(keys_per_sibling))]
    meta = KVBatchMeta(
        partition_id=CANONICAL,
        task_name="train",
        sample_ids=sample_ids,
        fields=["input_ids"],
        sequence_lengths=[7] * len(sample_ids),
        tags=[{"weight_version": torch.tensor(3)} for _ in sample_ids],  # stamp_tags mirrors tensors
    )
    attempts = [
        [attempt("sealed", keys, rollout_id=f"{group_id}_g{i}")] for i, keys in enumerate(keys_per_sibling)
    ]
    return group(group_id, attempts, status=status, canonical_meta=meta)


def inventory(
    keys_by_group: Mapping[str, Sequence[str]], schema_version: Any = SCHEMA_VERSION
) -> dict[str, Any]:
    """A schema-2 ledger: per group, one sibling sealed holding the keys (after a failed attempt) and one
    still dispatched."""
    groups = [
        group(
            group_id,
            [
                [attempt("failed"), attempt("sealed", keys, rollout_id=f"{group_id}_g0_a0")],
                [attempt("dispatched")],
            ],
        )
        for group_id, keys in keys_by_group.items()
    ]
    return {"schema_version": schema_version, "groups": groups, "open_train_step": None}


# ---- schema 3 ------------------------------------------------------------------------------------------


def attempt_v3(
    index: int, status: str, staging_keys: Sequence[str] = (), rollout_id: str = ""
) -> dict[str, Any]:
    """A schema-3 attempt (main line): a sealed one has a receipt with its keys, or none and no keys."""
    sealed = status == "sealed"
    receipt = (
        {"rollout_id": rollout_id, "manifest": [{"staging_key": key} for key in staging_keys]}
        if sealed and staging_keys
        else None
    )
    return {
        "attempt_index": index,
        "attempt_uuid": uuid.uuid4().bytes,
        "status": status,
        "receipt": receipt,
        "completion_receipt": None,
        "reward": 0.5 if sealed else None,
        "mask_sample": False if sealed else None,
        "staging_keys": list(staging_keys),
    }


def group_v3(group_id: str, attempts_per_sibling: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    current = [attempts[-1]["status"] for attempts in attempts_per_sibling]
    sealed = all(status == "sealed" for status in current)
    return {
        "group_id": group_id,
        "admission_id": f"admission-{group_id}",
        "prompt_id": "12",
        "prompt_ref": {"sample_id": "12", "task_name": "nemo_gym"},
        "task_source": "math",
        "resolved_agent_name": "math_agent" if "sealed" in current else None,
        "recovery_granularity": "sibling",
        "expected_generations": len(attempts_per_sibling),
        "target_step": 5,
        "start_weight_version": 4,
        "status": "ready_to_finalize" if sealed else "generating",
        "phase": "admitted",
        "siblings": [
            {"generation_index": index, "attempts": list(attempts)}
            for index, attempts in enumerate(attempts_per_sibling)
        ],
    }


def ledger_v3(groups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema_version": 3,
        "groups": list(groups),
        "pending_completed_execution_acknowledgements": [],
        "batch_shortfall": {4: 1},
        "sampler_stamps_target_steps": True,
    }


def sibling_history_v3(group_id: str, sibling: int, kept: Sequence[str]) -> list[dict[str, Any]]:
    """A sibling whose attempt 0 was abandoned and attempt 1 sealed `kept` (restore keeps those)."""
    return [attempt_v3(0, "abandoned"), attempt_v3(1, "sealed", kept, rollout_id=f"{group_id}_g{sibling}-a1")]


# ---- the replay index, NeMo Gym's state, snapshot manifests ---------------------------------------------


def route_plan(cleanup: Sequence[str], staging: str = STAGING) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "staging_partition": staging,
        "spans": [
            {
                "staging_key": key,
                "carry_len": 0,
                "generation_len": 4,
                "staged_route_len": 4,
                "extras_digest_version": 1,
                "extras_digest": "0" * 64,
            }
            for key in cleanup
        ],
        "cleanup_staging_keys": list(cleanup),
        "expected_token_length": 4 * len(cleanup),
    }


def replay_index(groups: Mapping[str, Sequence[str]], staging: str = STAGING) -> dict[str, Any]:
    """A replay index: per group id, one canonical row whose route plan cleans up the given staging keys."""
    entries = [
        {
            "meta": KVBatchMeta(
                partition_id=CANONICAL,
                task_name="train",
                sample_ids=[f"{group_id}_g0"],
                tags=[{"route_assembly_plan": route_plan(cleanup, staging), "weight_version": 4}],
            ),
            "start_weight": 4,
            "end_weight": 4,
            "target_step": 5,
            "group_id": group_id,
        }
        for group_id, cleanup in groups.items()
    ]
    return {
        "schema_version": 1,
        "storage": "tq_checkpoint",
        "partition_id": CANONICAL,
        "saved_capacity": 64,
        "manifest_digest": hashlib.sha256(repr(sorted(groups.items())).encode()).hexdigest(),
        "groups": entries,
    }


def gym_checkpoint(
    directory: Path, keys_by_kind: Mapping[str, Sequence[str]], name: str = "policy"
) -> dict[str, Any]:
    """Write a Gym model participant's manifest and storage reference index under `directory`; return
    the `gym_checkpoint` commit result naming them (kind -> keys: token_capture_staging,
    generation_prefix_cut)."""
    base = directory / "gym" / name
    base.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "schema_version": 1,
                "capture_key": f"{name}-rollout{index}",
                "boundary_model_call_id": f"call{index}",
                "kind": kind,
                "key": key,
            }
        )
        + "\n"
        for kind, keys in keys_by_kind.items()
        for index, key in enumerate(keys)
    ]
    index_bytes = "".join(lines).encode()
    (base / "storage_references.jsonl").write_bytes(index_bytes)
    participant_manifest = json.dumps({"participant": name, "rollouts": len(lines)}).encode()
    (base / "manifest.json").write_bytes(participant_manifest)
    identity = {"server_name": name, "component": "responses_api_models", "participant_name": name}
    return {
        "checkpoint_id": f"checkpoint-{directory.name}",
        "participants": [
            {
                "participant": identity,
                "payload": {
                    "rollouts": len(lines),
                    "rows": len(lines),
                    "excluded_tombstoned": 0,
                    "manifest_digest": hashlib.sha256(participant_manifest).hexdigest(),
                    "storage_reference_index": {
                        "schema_version": 1,
                        "relative_path": f"gym/{name}/storage_references.jsonl",
                        "sha256": hashlib.sha256(index_bytes).hexdigest(),
                        "records": len(lines),
                        "bytes": len(index_bytes),
                    },
                },
                "manifest": {
                    "participant": identity,
                    "relative_path": f"gym/{name}/manifest.json",
                    "manifest_digest": hashlib.sha256(participant_manifest).hexdigest(),
                },
            }
        ],
    }


def cut_proofs(
    checkpoint_id: str, prefixes: Mapping[str, Sequence[str]], failed: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Generation-cut proofs: per rollout a durable prefix keeping its staging keys; `failed` rollouts
    end in a durable failure (no keys). One proof per worker, as a multi-worker model server reports."""
    receipt_prefixes = [
        {
            "rollout_id": rollout,
            "attempt_index": 0,
            "disposition": "durable_prefix",
            "staging_keys": list(keys),
        }
        for rollout, keys in prefixes.items()
    ] + [{"rollout_id": rollout, "attempt_index": 0, "disposition": "durable_failure"} for rollout in failed]
    receipt = {
        "checkpoint_id": checkpoint_id,
        "cut_id": f"cut-{checkpoint_id}",
        "inventory": {"server_name": "policy"},
        "prefixes": receipt_prefixes,
    }
    return [{"workers": [{"generation_cut_receipt": receipt}, {"generation_cut_receipt": None}]}]


def snapshot_manifest(
    schema_version: int = 5,
    gym: dict[str, Any] | None = None,
    proofs: Sequence[dict[str, Any]] = (),
    base_train_step: int = 0,
) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "schema_version": schema_version,
        "base_train_step": base_train_step,
        "trainer_version": base_train_step,
        "current_epoch": 0,
        "sampler_dispatch_index": 3,
        "mutation_version": 17,
        "rolled_back_train_group_count": 0,
        "bootstrap_fingerprint": None if base_train_step else "f" * 64,
        "gym_topology_fingerprint": "a" * 64 if gym is not None else None,
        "gym_checkpoint": gym,
    }
    if schema_version < 6:
        manifest["gym_generation_cut_proofs"] = list(proofs)
    return manifest


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
    the ledger's real SHA-256, None none, any other string as is), the replay index, the manifest."""
    directory.mkdir(parents=True, exist_ok=True)
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


def expanding_ledger(fan_out: int = 3000) -> dict[str, Any]:
    """A schema-3 ledger of a few kilobytes naming fan_out**3 keys: one group referenced fan_out times,
    its sibling fan_out times, whose sealed attempt lists one key fan_out times."""
    key = cut_key("step_9", "bomb", "call0", 0)
    sealed = attempt_v3(0, "sealed", [key] * fan_out, rollout_id="bomb_g0")
    sibling = {"generation_index": 0, "attempts": [sealed]}
    bomb = group_v3("bomb", [[sealed]])
    bomb["siblings"] = [sibling] * fan_out
    return ledger_v3([bomb] * fan_out)


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
    print(f"wrote NeMo RL recovery points under {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
