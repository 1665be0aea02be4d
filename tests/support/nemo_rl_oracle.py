"""The oracle: the staging keys NeMo RL's restore keeps, computed from a checkpoint directory's files as
NeMo's own restore chooses and loads them (NVIDIA-NeMo/RL `resolve_latest_snapshot`, setup.py's anchor,
the ledger and replay index loaded in full with torch, as NeMo loads them, and the ledger's keys taken as
its `expected_staging_keys` takes them). It shares no code with
tq-gc's reader: a test that compares the two catches a reader that drifts from NeMo.

Which points: every `step_N` (NeMo restores the newest, and keeps `keep_top_k` older ones a restore
reaches once the newer are removed), each with the snapshots its restore would accept (newest first,
every one it would not pass over: a COMMITTED file for the August schema 1, a manifest that parses and
names the step's lineage); bootstrap snapshots only while no step exists. A step that is a link to
nothing, or one whose snapshots would all be passed over, makes NeMo's restore stop: RestoreRefused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from support.nemo_rl_data_plane import HISTOGRAM_MODULE, Histogram, importable, nemo_modules

INVENTORY = "rollout_recovery.pt"
REPLAY = "replay_buffer_metadata.pt"
_COUNTERS = (
    "base_train_step",
    "trainer_version",
    "current_epoch",
    "mutation_version",
    "rolled_back_train_group_count",
)


class RestoreRefused(Exception):
    """NeMo RL's restore would stop here."""


def restore_keeps(ckpt: Path) -> set[str]:
    return {key for point in restore_points(ckpt) for key in point_keeps(point)}


def restore_points(ckpt: Path) -> list[Path]:
    steps = sorted(
        (path for path in ckpt.iterdir() if re.fullmatch(r"step_\d+", path.name)),
        key=lambda path: int(path.name[5:]),
    )
    points: list[Path] = []
    for step in steps:
        if not step.is_dir():
            raise RestoreRefused(f"{step} is not there")
        info = _json(step / "training_info.json")  # load_training_info: no fallback
        if not isinstance(info, dict):
            raise RestoreRefused(f"{step}: training_info.json does not load as a mapping")
        current = info.get("current_step", 0)
        recorded = info.get("trainer_version")
        points.append(step)
        points += accepted_snapshots(step, current, current if recorded is None else recorded, None)
    bootstrap = ckpt / "bootstrap"
    if not steps and bootstrap.is_dir():
        points += accepted_snapshots(bootstrap, 0, 0, _bootstrap_fingerprint(bootstrap / "manifest.json"))
    return points


def _bootstrap_fingerprint(path: Path) -> str:
    """The fingerprint a bootstrap anchor's manifest records ("any" if none is there: NeMo's saves write
    one for their config), RestoreRefused if no config's manifest would equal it."""
    if not path.exists():
        return "any"
    anchor = _json(path)
    if not isinstance(anchor, dict):
        raise RestoreRefused(f"{path} does not load")
    expected = {"schema_version", "base_train_step", "trainer_version", "bootstrap_fingerprint"}
    if anchor.get("schema_version") != 1 and isinstance(anchor.get("bootstrap_identity"), dict):
        expected.add("bootstrap_identity")  # the newer layout's, not checked: its config is not known
    if (
        set(anchor) != expected
        or anchor["schema_version"] not in (1, 4, 5, 6)
        or anchor["base_train_step"] != 0
        or anchor["trainer_version"] != 0
        or not isinstance(anchor["bootstrap_fingerprint"], str)
    ):
        raise RestoreRefused(f"{path} is no config's bootstrap anchor")
    return str(anchor["bootstrap_fingerprint"])


def accepted_snapshots(anchor: Path, step: Any, version: Any, fingerprint: str | None) -> list[Path]:
    root = anchor / "rollout_snapshots"
    found = [path for path in root.glob("snapshot_*") if re.fullmatch(r"snapshot_\d+", path.name)]
    accepted, passed_over = [], []
    for snapshot in sorted(found, key=lambda path: int(path.name[9:]), reverse=True):
        manifest = _json(snapshot / "manifest.json")
        august = isinstance(manifest, dict) and manifest.get("schema_version") == 1
        august = august or (root / "LATEST").is_file()  # every August commit writes it
        if august and not (snapshot / "COMMITTED").is_file():
            continue  # the August restore looks only at committed snapshots
        if not _manifest_accepted(manifest, step, version, fingerprint):
            passed_over.append(snapshot)
            continue
        accepted.append(snapshot)
    if passed_over and not accepted:
        raise RestoreRefused(f"every snapshot of {anchor} is passed over")
    return accepted


def _manifest_accepted(manifest: Any, step: Any, version: Any, fingerprint: str | None) -> bool:
    if not isinstance(manifest, dict) or manifest.get("schema_version") not in (1, 4, 5, 6):
        return False
    counters = [manifest.get(name) for name in _COUNTERS]
    if manifest["schema_version"] != 1:
        counters.append(manifest.get("sampler_dispatch_index", "missing"))
    if not all(type(value) is int for value in counters) or min(counters[:5]) < 0:
        return False
    if manifest["schema_version"] >= 6 and manifest.get("gym_generation_cut_proofs"):
        return False
    if manifest["schema_version"] != 1 and not _gym_model_validates(manifest.get("gym_checkpoint")):
        return False
    return (
        manifest["base_train_step"] == step
        and manifest["trainer_version"] == version
        and (fingerprint == "any" or manifest.get("bootstrap_fingerprint") == fingerprint)
    )


def _gym_model_validates(gym: Any) -> bool:
    """GymCheckpointCommitResult's required fields, as pydantic validates them (their types only)."""
    if gym is None:
        return True
    if not isinstance(gym, dict) or type(gym.get("checkpoint_id")) is not str:
        return False
    entries = gym.get("participants")
    return isinstance(entries, list) and all(_gym_participant_validates(entry) for entry in entries)


def _gym_participant_validates(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    parts = [entry.get("participant"), entry.get("payload"), entry.get("manifest")]
    if any(type(part) is not dict for part in parts):
        return False
    return type(parts[2].get("relative_path")) is str and type(parts[2].get("manifest_digest")) is str


def point_keeps(point: Path) -> set[str]:
    keys: set[str] = set()
    with nemo_modules(), importable(HISTOGRAM_MODULE, Histogram=Histogram):  # loaded in full, as NeMo does
        if (point / INVENTORY).exists():
            ledger = torch.load(point / INVENTORY, weights_only=False)
            seen_attempt_ids: set[str] = set()
            for group_state in ledger["groups"]:
                meta = group_state.get("canonical_meta")  # schema 2: published, its route plans keep
                if meta is not None:
                    keys.update(route_plan_cleanup(meta.tags))
                    continue
                if ledger["schema_version"] == 3:
                    _check_branch_identities(group_state)
                attempt_ids = [
                    attempt["attempt_id"]
                    for sibling in group_state.get("siblings", [])
                    for attempt in sibling["attempts"]
                    if "attempt_id" in attempt
                ]
                if set(attempt_ids) & seen_attempt_ids or len(set(attempt_ids)) != len(attempt_ids):
                    raise RestoreRefused("duplicate attempt_id")
                seen_attempt_ids.update(attempt_ids)
                for sibling in group_state.get("siblings", []):  # schema 4's prompt references have none
                    if sibling["attempts"][-1]["status"] == "sealed":
                        keys.update(sibling["attempts"][-1]["staging_keys"])
        if (point / REPLAY).exists():
            for replay_group in torch.load(point / REPLAY, weights_only=False)["groups"]:
                keys.update(route_plan_cleanup(replay_group["meta"].tags))
    manifest = _json(point / "manifest.json")
    if isinstance(manifest, dict) and manifest.get("schema_version") != 1:
        for participant in (manifest.get("gym_checkpoint") or {}).get("participants", []):
            if participant["participant"]["component"] == "responses_api_models":
                index = point / participant["payload"]["storage_reference_index"]["relative_path"]
                keys.update(json.loads(line)["key"] for line in index.read_text().splitlines() if line)
        for proof in manifest.get("gym_generation_cut_proofs", []):
            for worker in proof.get("workers", []):
                for prefix in (worker.get("generation_cut_receipt") or {}).get("prefixes", []):
                    if prefix["disposition"] == "durable_prefix":
                        keys.update(prefix["staging_keys"])
    return keys


def _check_branch_identities(group_state: dict[str, Any]) -> None:
    """Schema 3's attempt identities: the branch layout (b2a048c9a) derives gate ids from group,
    generation and attempt id, a sealed or finalized receipt naming its own; the main line's sealed
    receipt names Gym's capture key of its attempt index."""
    for index, sibling in enumerate(group_state.get("siblings", [])):
        logical = f"{group_state['group_id']}_g{index}"
        for number, attempt in enumerate(sibling["attempts"]):
            if "attempt_index" in attempt:  # the main line: gym_capture_key(logical, attempt_index)
                key = logical if number == 0 else f"{logical}-a{number}"
                if attempt["attempt_index"] != number or sibling["generation_index"] != index:
                    raise RestoreRefused(f"attempt indices of {logical} are not contiguous")
                if (
                    attempt["status"] == "sealed"
                    and attempt["receipt"]
                    and attempt["receipt"]["rollout_id"] != key
                ):
                    raise RestoreRefused(f"sealed receipt identity mismatch at {key}")
                continue
            if "gate_rollout_id" not in attempt:
                continue  # another layout
            gate = f"{logical}_a{attempt['attempt_id']}"
            if (
                sibling["logical_rollout_id"] != logical
                or not attempt["attempt_id"]
                or attempt["gate_rollout_id"] != gate
            ):
                raise RestoreRefused(f"gate rollout ID mismatch at {gate}")
            if attempt["status"] in ("sealed", "finalized") and attempt["receipt"]["rollout_id"] != gate:
                raise RestoreRefused(f"restored receipt of {gate} names another rollout")


def route_plan_cleanup(tags: list[dict[str, Any]] | None) -> set[str]:
    return {
        key
        for tag in tags or []
        if "route_assembly_plan" in tag
        for key in _decoded(tag["route_assembly_plan"])["cleanup_staging_keys"]
    }


_SPAN_FIELDS = {
    1: {"staging_key", "carry_len", "generation_len", "staged_route_len"},
    2: {
        "staging_key",
        "carry_len",
        "generation_len",
        "staged_route_len",
        "extras_digest_version",
        "extras_digest",
    },
}


def _decoded(plan: Any) -> dict[str, Any]:
    """The plan, if NeMo's `decode_route_plan` of its version reads it (its fields exactly); else its
    restore stops."""
    fields = {"schema_version", "staging_partition", "spans", "cleanup_staging_keys", "expected_token_length"}
    if not isinstance(plan, dict) or set(plan) != fields or not isinstance(plan["spans"], list):
        raise RestoreRefused(f"route plan {plan!r} does not decode")
    version = plan["schema_version"]
    expected = (
        _SPAN_FIELDS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
    )
    if expected is None or any(not isinstance(span, dict) or set(span) != expected for span in plan["spans"]):
        raise RestoreRefused(f"route plan {plan!r} is of no version NeMo decodes")
    return plan


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
