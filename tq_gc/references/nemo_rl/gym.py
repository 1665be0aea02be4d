"""The rows a rollout snapshot's `manifest.json` makes NeMo RL's restore keep (NeMo Gym's part).

`manifest.json` (snapshot schema 4, 5 or 6) may carry:
- `gym_checkpoint`: the Gym participants' commit result. Each participant's own manifest file
  (`manifest.relative_path`) must be there with SHA-256 `manifest.manifest_digest`; each model
  participant (`component: responses_api_models`) names a JSON-lines index,
  `payload.storage_reference_index` `{relative_path, sha256, bytes, records}`, whose records'
  `key`s are TQ staging rows the restore keeps (`gym_checkpoint_staging_keys`; kinds
  `token_capture_staging` and, from schema 6, `generation_prefix_cut`).
- `gym_generation_cut_proofs` (schema 5): proofs whose receipts (`generation_cut_receipt`, directly or
  per worker) list `prefixes`; a `durable_prefix` one keeps its `staging_keys`, a `durable_failure` one
  none (`gym_generation_cut_staging_keys`). NeMo's restore leaves out the cuts of rollouts it re-runs
  from a newer attempt; this reader keeps them all, the safe side.
Every file is checked as NeMo's restore checks it; anything it would refuse fails here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError

AUGUST_SCHEMA = 1
SNAPSHOT_SCHEMA_VERSIONS = frozenset({AUGUST_SCHEMA, 4, 5, 6})
MODEL_COMPONENT = "responses_api_models"
Files = Mapping[str, bytes | None]


def artifact_paths(manifest: Any) -> list[str]:
    """The relative paths of the Gym files a manifest names (to read them), as far as it parses."""
    paths: list[str] = []
    for _, participant in _participants(manifest, strict=False):
        for path in (
            _dig(participant, "manifest", "relative_path"),
            _index_of(participant).get("relative_path"),
        ):
            if isinstance(path, str) and _safe(path):
                paths.append(path)
    return paths


def staging_keys(manifest: Any, files: Files, budget: KeyBudget) -> set[str]:
    """Every staging key the snapshot's Gym state keeps. Raises InventoryError."""
    if not isinstance(manifest, dict):
        raise InventoryError("manifest.json must hold a JSON object")
    version = manifest.get("schema_version")
    if type(version) is not int or version not in SNAPSHOT_SCHEMA_VERSIONS:
        raise InventoryError(
            f"manifest.json: schema_version is {version!r}; this reader knows rollout snapshot schema "
            f"versions {', '.join(map(str, sorted(SNAPSHOT_SCHEMA_VERSIONS)))}: upgrade tq-gc"
        )
    if version == AUGUST_SCHEMA:
        return set()  # the August snapshot manifest names no Gym state (its from_mapping reads none)
    return _checkpoint_keys(manifest, files, budget) | _cut_proof_keys(manifest, version, budget)


def _checkpoint_keys(manifest: Mapping[str, Any], files: Files, budget: KeyBudget) -> set[str]:
    keys: set[str] = set()
    for where, participant in _participants(manifest, strict=True):
        reference = participant.get("manifest")
        path, digest = (
            _dig(participant, "manifest", "relative_path"),
            _dig(participant, "manifest", "manifest_digest"),
        )
        if not isinstance(reference, dict) or not isinstance(path, str) or not isinstance(digest, str):
            raise InventoryError(
                f"manifest.json: {where}.manifest must name relative_path and manifest_digest"
            )
        _verified(path, files, digest, None, f"{where}'s manifest")
        component = _dig(participant, "participant", "component")
        if component == MODEL_COMPONENT:
            keys |= _index_keys(
                _index_of(participant), files, budget, f"{where}.payload.storage_reference_index"
            )
    return keys


def _index_keys(index: Mapping[str, Any], files: Files, budget: KeyBudget, where: str) -> set[str]:
    path, digest, size, records = (
        index.get(name) for name in ("relative_path", "sha256", "bytes", "records")
    )
    if (
        not isinstance(path, str)
        or not isinstance(digest, str)
        or type(size) is not int
        or type(records) is not int
    ):
        raise InventoryError(f"manifest.json: {where} must name relative_path, sha256, bytes and records")
    content = _verified(path, files, digest, size, where)
    lines = [line for line in content.split(b"\n") if line.strip()]
    if len(lines) != records:
        raise InventoryError(f"{path}: holds {len(lines)} records, manifest.json says {records}")
    budget.count(len(lines), path)
    keys: set[str] = set()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise InventoryError(f"{path} record {number} is not valid JSON") from None
        key = record.get("key") if isinstance(record, dict) else None
        if not isinstance(key, str) or not key:
            raise InventoryError(f"{path} record {number} has no key string")
        keys.add(key)
    return keys


def _cut_proof_keys(manifest: Mapping[str, Any], version: int, budget: KeyBudget) -> set[str]:
    proofs = manifest.get("gym_generation_cut_proofs", [])
    if not isinstance(proofs, list) or not all(isinstance(proof, dict) for proof in proofs):
        raise InventoryError("manifest.json: gym_generation_cut_proofs must be a list of objects")
    if proofs and version != 5:
        raise InventoryError(
            f"manifest.json: gym_generation_cut_proofs in snapshot schema {version} (only 5 has them)"
        )
    keys: set[str] = set()
    for p, proof in enumerate(proofs):
        for r, receipt in enumerate(_receipts(proof, f"gym_generation_cut_proofs[{p}]")):
            where = f"gym_generation_cut_proofs[{p}] receipt {r}"
            prefixes = receipt.get("prefixes")
            if not isinstance(prefixes, list):
                raise InventoryError(f"manifest.json: {where}: prefixes must be a list")
            for prefix in prefixes:
                keys.update(_prefix_keys(prefix, budget, where))
    return keys


def _receipts(proof: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    direct = proof.get("generation_cut_receipt")
    if isinstance(direct, dict):
        return [direct]
    workers = proof.get("workers")
    if workers is None:
        return []
    if not isinstance(workers, list) or not all(isinstance(worker, dict) for worker in workers):
        raise InventoryError(f"manifest.json: {where}.workers must be a list of objects")
    found = [worker.get("generation_cut_receipt") for worker in workers]
    if not all(receipt is None or isinstance(receipt, dict) for receipt in found):
        raise InventoryError(f"manifest.json: {where}: a worker's generation_cut_receipt is not an object")
    return [receipt for receipt in found if receipt is not None]


def _prefix_keys(prefix: Any, budget: KeyBudget, where: str) -> list[str]:
    if not isinstance(prefix, dict):
        raise InventoryError(f"manifest.json: {where}: a prefix is not an object")
    disposition = prefix.get("disposition")
    if disposition == "durable_failure":
        return []
    if disposition != "durable_prefix":
        raise InventoryError(f"manifest.json: {where}: unknown prefix disposition {disposition!r}")
    keys = budget.take(prefix.get("staging_keys"), f"manifest.json {where} staging_keys")
    if not keys:
        raise InventoryError(f"manifest.json: {where}: a durable prefix without staging keys")
    return keys


def _verified(path: str, files: Files, digest: str, size: int | None, what: str) -> bytes:
    if not _safe(path):
        raise InventoryError(f"manifest.json: {what} path {path!r} is not safely relative to the snapshot")
    content = files.get(path)
    if content is None:
        raise InventoryError(f"{what} {path} is missing: NeMo RL's restore refuses this snapshot")
    if size is not None and len(content) != size:
        raise InventoryError(f"{path} is {len(content)} bytes, manifest.json says {size}")
    found = hashlib.sha256(content).hexdigest()
    if found != digest:
        raise InventoryError(f"{path}: SHA-256 is {found}, manifest.json records {digest}")
    return content


def _participants(manifest: Any, *, strict: bool) -> Iterator[tuple[str, Mapping[str, Any]]]:
    checkpoint = manifest.get("gym_checkpoint") if isinstance(manifest, dict) else None
    if checkpoint is None:
        return
    participants = checkpoint.get("participants") if isinstance(checkpoint, dict) else None
    if not isinstance(participants, list):
        if strict:
            raise InventoryError("manifest.json: gym_checkpoint.participants must be a list")
        return
    for index, participant in enumerate(participants):
        if isinstance(participant, dict):
            yield f"gym_checkpoint.participants[{index}]", participant
        elif strict:
            raise InventoryError(f"manifest.json: gym_checkpoint.participants[{index}] is not an object")


def _index_of(participant: Mapping[str, Any]) -> Mapping[str, Any]:
    index = _dig(participant, "payload", "storage_reference_index")
    return index if isinstance(index, dict) else {}


def _dig(value: Any, *names: str) -> Any:
    for name in names:
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _safe(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts
