"""Which committed rollout snapshots NeMo RL's restore may start from, anchor by anchor, decided as its
own `resolve_latest_snapshot` decides (`nemo_rl/algorithms/single_controller_utils/rollout_checkpoint.py`).

NeMo walks an anchor's `rollout_snapshots/snapshot_N` newest first and takes the first whose
`manifest.json` parses and belongs to the anchor; a snapshot it passes over is never restored from, so
here it protects nothing. If it passed over every one, its restore raises ("no committed rollout
snapshot matches the selected trainer anchor"): here the source fails closed. Cited, in NeMo RL:
- August layout, snapshot schema 1: branch `amahishi/partial-rollout-periodic-v2` at 9355cc54,
  rollout_checkpoint.py lines 466-515 (`resolve_latest_snapshot`: a candidate without its `COMMITTED`
  file is skipped silently, lines 489-490; a missing, unparsable or foreign manifest is passed over,
  lines 491-507; none taken and some passed over raises, lines 510-515), `RolloutSnapshotManifest.
  from_mapping` lines 179-226; `commit_snapshot` (lines 423-462) writes the `LATEST` pointer (line 441
  on), which nothing reads back, and prunes by plain `shutil.rmtree` (line 461).
- Snapshot schemas 4-6 (the newer layout, no COMMITTED file; read from the code index, 2026-09): the same
  walk, its `from_mapping` checking also `sampler_dispatch_index`, `gym_topology_fingerprint` and the cut
  proofs' schema.
The anchor's identity: for `step_N`, its `training_info.json` (`current_step`, `trainer_version`, else
the current step; setup.py lines 832-838 at 9355cc54; one NeMo cannot load fails closed, as its restore
stops) and no bootstrap fingerprint; for `bootstrap`, read only while no `step_N` exists (lines
839-881), step 0, version 0 and the fingerprint its own `manifest.json` records (validated against the
run's config at line 864: one no config matches fails closed).

Every snapshot it would accept is kept, not only the newest: the older ones are the fallbacks NeMo
retains (`keep_latest_k`). One it would accept but whose files its load refuses fails when read
(point.py), as NeMo's restore would stop on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tq_gc.references.nemo_rl.errors import InventoryError

MANIFEST = "manifest.json"
COMMITTED = "COMMITTED"
LATEST = "LATEST"
TRAINING_INFO = "training_info.json"
AUGUST_SCHEMA = 1
NEWER_SCHEMAS = frozenset({4, 5, 6})
_COUNTERS = (
    "base_train_step",
    "trainer_version",
    "current_epoch",
    "mutation_version",
    "rolled_back_train_group_count",
)
_BOOTSTRAP_KEYS = frozenset({"schema_version", "base_train_step", "trainer_version", "bootstrap_fingerprint"})
_MAX_SMALL_FILE_BYTES = 16 * 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Anchor:
    """What a snapshot's manifest must name to belong to its anchor (None: not known, not checked)."""

    train_step: int
    trainer_version: int | None
    bootstrap_fingerprint: str | bool | None  # False: not known, not checked


def step_anchor(step: Path) -> Anchor:
    """The lineage `step`'s snapshots must name. NeMo's restore loads the step's training info before
    anything else, whatever its restore mode (setup.py lines 803-807 at 9355cc54; `load_training_info`,
    nemo_rl/utils/checkpoint.py lines 571-587, opens it without a fallback), and takes its items as a
    mapping (`_get_grpo_save_state`, grpo.py lines 340-352): one missing, unreadable, torn or not an
    object stops the restore, so the source fails closed (InventoryError)."""
    info = _json(step / TRAINING_INFO)
    if not isinstance(info, dict):
        problem = "is missing or unreadable" if info is None else "is not a JSON object"
        raise InventoryError(f"{step / TRAINING_INFO} {problem}: NeMo RL's restore cannot load it, and stops")
    current = info.get("current_step", 0)  # the missing field's default (grpo.py lines 327-338)
    version = info.get("trainer_version")
    return Anchor(current, current if version is None else version, None)


def bootstrap_anchor(bootstrap: Path) -> Anchor:
    """The lineage bootstrap snapshots must name. Its manifest, when there, is compared whole with the one
    NeMo would write for the run's config (`ensure_bootstrap_anchor` and `validate_bootstrap_anchor`,
    rollout_checkpoint.py lines 337-356 and 384-402 at 9355cc54; the newer layout adds a
    `bootstrap_identity` mapping): one that parses to nothing any config writes stops the restore, so the
    source fails closed. A missing one is written anew by NeMo's periodic saves for the run's config,
    whose fingerprint tq-gc cannot know: every fingerprint is then accepted (False), a superset of what
    NeMo restores."""
    path = bootstrap / MANIFEST
    manifest = _json(path)
    if manifest is None and not path.exists():
        return Anchor(0, 0, False)
    problem = _bootstrap_manifest_problem(manifest)
    if problem is not None:
        raise InventoryError(f"{path} {problem}: NeMo RL's restore refuses the bootstrap anchor, and stops")
    fingerprint: str = manifest["bootstrap_fingerprint"]
    return Anchor(0, 0, fingerprint)


def _bootstrap_manifest_problem(manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return "is unreadable, torn or not a JSON object"
    version = manifest.get("schema_version")
    august = type(version) is int and version == AUGUST_SCHEMA
    if not august and not (type(version) is int and version in NEWER_SCHEMAS):
        return f"has the unsupported schema_version {version!r}"
    keys = set(manifest) - {"bootstrap_identity"}
    if keys != _BOOTSTRAP_KEYS or (august and "bootstrap_identity" in manifest):
        return f"has the fields {sorted(manifest)}, not those of a bootstrap anchor"
    if manifest["base_train_step"] != 0 or manifest["trainer_version"] != 0:
        return "names a step or trainer version other than 0"
    if not isinstance(manifest["bootstrap_fingerprint"], str):
        return "has no bootstrap fingerprint string"
    if "bootstrap_identity" in manifest and not isinstance(manifest["bootstrap_identity"], dict):
        return "has a bootstrap_identity that is not an object"
    return None


def restorable(anchor_directory: Path, snapshots: list[Path], anchor: Anchor) -> list[Path]:
    """The snapshots (of `anchor_directory`) NeMo's restore would accept, newest first. InventoryError
    if it would pass over all of them, and so refuse to restore."""
    accepted: list[Path] = []
    passed_over: list[str] = []
    for snapshot in sorted(snapshots, key=_sequence, reverse=True):
        reason = _pass_over_reason(snapshot, anchor)
        if reason is None:
            accepted.append(snapshot)
        elif reason:
            passed_over.append(f"{snapshot.name}: {reason}")
    if not accepted and passed_over:
        raise InventoryError(
            f"{anchor_directory}: NeMo RL's restore passes over every committed rollout snapshot here "
            f"({'; '.join(passed_over)}) and then refuses to restore: inspect and remove them"
        )
    return accepted


def _pass_over_reason(snapshot: Path, anchor: Anchor) -> str | None:
    """None if NeMo would accept the snapshot; "" if it skips it silently; else why it passes it over."""
    manifest = _json(snapshot / MANIFEST)
    version = manifest.get("schema_version") if isinstance(manifest, dict) else None
    if not (snapshot / COMMITTED).is_file() and (
        version == AUGUST_SCHEMA or (snapshot.parent / LATEST).is_file()
    ):
        # The August restore looks only at snapshots with their COMMITTED file, whatever else they hold
        # (lines 489-490 at 9355cc54): one its plain-delete pruning (line 461) cut short may have lost its
        # manifest too. Its anchor is told by its schema-1 manifest or by the LATEST pointer every August
        # commit writes (lines 441-446) before it prunes; the newer layout writes neither.
        return ""
    if manifest is None:  # the newer restore passes it over; the August one too, if COMMITTED
        return "missing or unreadable manifest"
    if not isinstance(manifest, dict):
        return "manifest.json is not valid JSON object"
    problem = _manifest_problem(manifest, version)
    if problem is not None:
        return problem
    if manifest["base_train_step"] != anchor.train_step or (
        anchor.trainer_version is not None and manifest["trainer_version"] != anchor.trainer_version
    ):
        return "belongs to another trainer lineage"
    if (
        anchor.bootstrap_fingerprint is not False
        and manifest.get("bootstrap_fingerprint") != anchor.bootstrap_fingerprint
    ):
        return "bootstrap fingerprint does not match its anchor"
    return None


def _manifest_problem(manifest: dict[str, Any], version: Any) -> str | None:
    """What NeMo's `RolloutSnapshotManifest.from_mapping` would refuse in the manifest, or None."""
    newer = type(version) is int and version in NEWER_SCHEMAS
    if not newer and not (type(version) is int and version == AUGUST_SCHEMA):
        return f"unsupported rollout snapshot schema version {version!r}"
    names = (*_COUNTERS, "sampler_dispatch_index") if newer else _COUNTERS
    if any(type(manifest.get(name)) is not int for name in names):
        return "a counter is not an integer"
    if min(manifest[name] for name in _COUNTERS) < 0 or (newer and manifest["sampler_dispatch_index"] < -1):
        return "a counter is negative"
    fingerprint = manifest.get("bootstrap_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        return "bootstrap_fingerprint is not a string"
    if not newer:
        return None
    topology = manifest.get("gym_topology_fingerprint")
    if topology is not None and not (isinstance(topology, str) and _SHA256.fullmatch(topology)):
        return "gym_topology_fingerprint is not a SHA-256 digest"
    proofs = manifest.get("gym_generation_cut_proofs", [])
    if not isinstance(proofs, list) or not all(isinstance(proof, dict) for proof in proofs):
        return "gym_generation_cut_proofs is not a list of objects"
    if proofs and version != 5:
        return f"generation-cut proofs in schema {version}"
    gym = manifest.get("gym_checkpoint")
    if gym is not None and topology is None:
        return "Gym participant state without a Gym topology fingerprint"
    return None if gym is None else _gym_checkpoint_problem(gym)


def _gym_checkpoint_problem(gym: Any) -> str | None:
    """A `gym_checkpoint` shape that NeMo's `GymCheckpointCommitResult.model_validate` rejects in every
    published version of its pydantic model (`from_mapping`, and nemo_rl/environments/gym_checkpoint.py
    in the code index: `checkpoint_id: str`, `participants: list[...]`, each with the `participant`,
    `payload` and `manifest` objects, the manifest with its `relative_path` and `manifest_digest`
    strings): NeMo passes the snapshot over. Only certain rejections are listed: a snapshot passed over
    protects nothing, so one NeMo might accept is never passed over here; the rest of the structure, and
    the files, are checked when the snapshot is read (gym.py), failing closed."""
    if not isinstance(gym, dict) or not isinstance(gym.get("checkpoint_id"), str):
        return "gym_checkpoint is not an object with a checkpoint_id string"
    participants = gym.get("participants")
    if not isinstance(participants, list):
        return "gym_checkpoint.participants is not a list"
    for participant in participants:
        if not isinstance(participant, dict) or not all(
            isinstance(participant.get(name), dict) for name in ("participant", "payload", "manifest")
        ):
            return "a Gym participant is not an object with its participant, payload and manifest objects"
        reference = participant["manifest"]
        if not all(isinstance(reference.get(name), str) for name in ("relative_path", "manifest_digest")):
            return "a Gym participant's manifest names no relative_path or manifest_digest string"
    return None


def _json(path: Path) -> Any:
    """The JSON document at `path`; None if it is not a readable regular file (NeMo treats an OSError
    on the manifest as a reason to pass over); a sentinel string if it does not parse."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as file:
            content = file.read(_MAX_SMALL_FILE_BYTES + 1)
    except OSError:
        return None
    if len(content) > _MAX_SMALL_FILE_BYTES:
        return "too large"
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return "not JSON"


def _sequence(snapshot: Path) -> int:
    return int(snapshot.name.rsplit("_", 1)[1])
