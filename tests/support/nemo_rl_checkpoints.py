"""NeMo RL checkpoint directories as its data-plane branch writes them, for tests of the
`nemo_rl_recovery` manifest format: `step_N/rollout_recovery.pt` (a torch.save of the recovery
ledger's state dict, schema 2) beside `step_N/data_plane/metadata.json`, whose `user_metadata`
records the schema version and the SHA-256 of the .pt file's bytes.

Also writes what must fail: a truncated file, a wrong digest, an unknown schema version, a file that
would run code if it were unpickled in full, and checkpoints still being written (`tmp_step_N`,
`old_step_N`).

    python tests/support/nemo_rl_checkpoints.py OUT_DIR   writes one of each under OUT_DIR
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 2
INVENTORY = "rollout_recovery.pt"
STAGING = "rollout_staging"


def cut_key(checkpoint: str, rollout: str, call: str, seq: int) -> str:
    """A generation-cut chunk row: `__generation_cut__/{checkpoint_id}/{rollout_id}/{model_call_id}/{seq}`."""
    return f"__generation_cut__/{checkpoint}/{rollout}/{call}/{seq}"


def attempt(status: str, staging_keys: Sequence[str] = (), rollout_id: str = "") -> dict[str, Any]:
    """One attempt as the ledger's state_dict writes it; a sealed one carries a receipt naming its keys."""
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


def group(group_id: str, attempts_per_sibling: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "prompt_id": "70",
        "prompt_ref": {"sample_id": "70", "task_name": "nemo_gym"},
        "expected_generations": len(attempts_per_sibling),
        "target_step": 3,
        "start_weight_version": 3,
        "status": "generating",
        "canonical_meta": None,
        "group_min_weight_version": None,
        "group_max_weight_version": None,
        "claimed_train_step": None,
        "siblings": [
            {"generation_index": index, "attempts": list(attempts)}
            for index, attempts in enumerate(attempts_per_sibling)
        ],
    }


def inventory(
    keys_by_group: Mapping[str, Sequence[str]], schema_version: Any = SCHEMA_VERSION
) -> dict[str, Any]:
    """A ledger state dict: per group, one sealed sibling holding the keys and one still dispatched."""
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


def saved(state: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def write_checkpoint(
    directory: Path,
    state: Any,
    *,
    digest: str | None = "auto",
    metadata: bool = True,
    payload: bytes | None = None,
) -> Path:
    """`directory/rollout_recovery.pt` and `directory/data_plane/metadata.json`. digest="auto" records
    the payload's real SHA-256; None records none; any other string is recorded as is."""
    directory.mkdir(parents=True, exist_ok=True)
    content = saved(state) if payload is None else payload
    (directory / INVENTORY).write_bytes(content)
    if metadata:
        user_metadata: dict[str, Any] = {"rollout_recovery_schema_version": SCHEMA_VERSION}
        if digest is not None:
            recorded = hashlib.sha256(content).hexdigest() if digest == "auto" else digest
            user_metadata["rollout_recovery_payload_sha256"] = recorded
            user_metadata["rollout_recovery_group_count"] = (
                len(state.get("groups", [])) if isinstance(state, dict) else 0
            )
        (directory / "data_plane").mkdir(exist_ok=True)
        (directory / "data_plane" / "metadata.json").write_text(
            json.dumps({"format_version": 1, "user_metadata": user_metadata})
        )
    return directory / INVENTORY


def write_truncated(directory: Path, state: Any) -> Path:
    """A save cut short (disk full, a killed writer): half the bytes, no digest to catch it."""
    content = saved(state)
    return write_checkpoint(directory, state, digest=None, payload=content[: len(content) // 2])


class RunsCode:
    """Unpickled in full, this would create `marker` (a directory): weights-only loading must refuse it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def main(out: Path) -> None:
    keys = {"g1": [cut_key("step_3", "g1_g0_a0", "call1", 0), cut_key("step_3", "g1_g0_a0", "call1", 1)]}
    write_checkpoint(out / "step_3", inventory(keys))
    write_checkpoint(out / "wrong_digest" / "step_3", inventory(keys), digest="0" * 64)
    write_checkpoint(out / "unknown_schema" / "step_3", inventory(keys, schema_version=3))
    write_truncated(out / "truncated" / "step_3", inventory(keys))
    write_checkpoint(out / "in_progress" / "tmp_step_4", inventory(keys))
    print(f"wrote NeMo RL checkpoint directories under {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
