"""What a NeMo RL recovery point holds beside its ledger: the replay index (canonical groups whose tags
carry route plans), NeMo Gym's participant state (digest-bound JSON-lines storage reference indexes),
generation-cut proofs, and a snapshot's `manifest.json` (schema 4-6)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support.nemo_rl_data_plane import CANONICAL, STAGING, KVBatchMeta

# ---- the replay index, NeMo Gym's state, snapshot manifests ---------------------------------------------


def route_plan(cleanup: Sequence[str], staging: str = STAGING, schema_version: int = 2) -> dict[str, Any]:
    """A route plan as NeMo's `encode_route_plan` writes it: version 1 (the earlier branches) or 2
    (amahishi/partial-rollout-periodic-v2 and the other -v2 branches: each span adds its extras digest)."""
    extras = {"extras_digest_version": 1, "extras_digest": "0" * 64} if schema_version == 2 else {}
    return {
        "schema_version": schema_version,
        "staging_partition": staging,
        "spans": [
            {"staging_key": key, "carry_len": 0, "generation_len": 4, "staged_route_len": 4, **extras}
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
