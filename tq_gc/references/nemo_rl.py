"""NeMo RL's rollout-recovery inventory (`rollout_recovery.pt`), read as a manifest: schema version 2.

NeMo RL's data-plane checkpoint writes, per checkpoint directory, `rollout_recovery.pt` (a `torch.save`
of its recovery ledger's state dict) next to `data_plane/metadata.json`:

    {"schema_version": 2,
     "groups": [{"group_id": ..., "siblings": [{"generation_index": 0,
                 "attempts": [{"attempt_uuid": b"...", "status": "sealed", "receipt": {...},
                               "reward": 1.0, "staging_keys": ["..."]}]}]}],
     ...}

Its restore clears every staging row the inventory does not list, so the rows a committed checkpoint
still needs are the attempts' `staging_keys`. This reader takes the staging keys of every attempt,
whatever its status (NeMo RL's own restore keeps those of each sibling's last attempt when sealed, and
only sealed attempts carry keys): a superset, the safe side.

A checkpoint directory is not trusted code: the file is loaded with `torch.load(weights_only=True)` only,
which builds containers, strings, numbers, bytes and tensors and refuses any other Python global; it is
never unpickled in full. The bytes are read once (bounded by the source's max_file_bytes), digested,
and loaded from memory, so the digest checked is the digest of what was parsed.

`data_plane/metadata.json` (beside the file's directory), when present, must be a JSON object; when its
`user_metadata` carries `rollout_recovery_payload_sha256`, it must be the SHA-256 of the `.pt` file's
bytes (the whole file, as NeMo RL digests what it wrote), and a `rollout_recovery_schema_version` there
must be this reader's version. Anything else unknown fails: another schema version, a value of the wrong
type, an attempt status this version does not define. The format comes from a branch that may still
change: a new version is a new reader, never a guess.

Checkpoint directories being written are NeMo RL's `tmp_step_N` (then renamed `step_N`) and `old_step_N`
(the previous `step_N`, while a save replaces it), and `*.tmp`/`*.old` by the same convention: while one
sits beside the directories a glob covers, the references it will hold cannot be read yet.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tq_gc.references.globwalk import ANY_DEPTH, Pattern, match_files

SCHEMA_VERSION = 2
INVENTORY_FILE = "rollout_recovery.pt"
METADATA_FILE = Path("data_plane") / "metadata.json"
DIGEST_KEY = "rollout_recovery_payload_sha256"
SCHEMA_VERSION_KEY = "rollout_recovery_schema_version"
ATTEMPT_STATUSES = frozenset({"reserved", "dispatched", "sealed", "failed", "abandoned"})
IN_PROGRESS_PREFIXES = ("tmp_", "old_")
IN_PROGRESS_SUFFIXES = (".tmp", ".old")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
# torch words a refused global as "Unsupported global: GLOBAL m.f" or "unsupported GLOBAL m.f whose ...".
_UNSUPPORTED_GLOBAL = re.compile(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)")


class InventoryError(ValueError):
    """The inventory (or its metadata) is not one this reader knows: the message says what."""


def staging_keys(content: bytes, metadata: bytes | None) -> list[str]:
    """The staging keys a `rollout_recovery.pt` (its bytes) names, after checking it against its
    `data_plane/metadata.json` (its bytes, None when there is none). Raises InventoryError."""
    expected = _expected_digest(metadata) if metadata is not None else None
    if expected is not None:
        found = hashlib.sha256(content).hexdigest()
        if found != expected:
            raise InventoryError(
                f"SHA-256 of the file is {found}, but data_plane/metadata.json records {expected}: the "
                "file is not the one the checkpoint committed"
            )
    return _keys_of(_load(content))


def in_progress_directories(glob: str) -> list[Path]:
    """Directories beside those `glob`'s last directory component matches whose name says a save is
    writing or replacing them (tmp_X, old_X, X.tmp, X.old for an X the component matches). Raises
    globwalk.UnreadablePath when a directory on the way cannot be listed."""
    pattern = Pattern.parse(glob)
    components = [*filter(None, pattern.base.split("/")), *pattern.parts]
    if len(components) < 2:
        return []  # a file at the root: no checkpoint directory to speak of
    *parents, committed = components[:-1]
    if committed == ANY_DEPTH:
        parents, committed = [*parents, ANY_DEPTH], "*"
    names = [prefix + committed for prefix in IN_PROGRESS_PREFIXES]
    names += [committed + suffix for suffix in IN_PROGRESS_SUFFIXES]
    found: set[Path] = set()
    for name in names:
        found.update(match_files("/" + "/".join([*parents, name])))
    return sorted(path for path in found if path.is_dir())


def metadata_path(inventory: Path) -> Path:
    return inventory.parent / METADATA_FILE


def _expected_digest(metadata: bytes) -> str | None:
    try:
        document = json.loads(metadata)
    except (ValueError, RecursionError) as exc:
        raise InventoryError(f"data_plane/metadata.json is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise InventoryError("data_plane/metadata.json must hold a JSON object")
    user_metadata = document.get("user_metadata")
    if user_metadata is None:
        return None
    if not isinstance(user_metadata, dict):
        raise InventoryError("data_plane/metadata.json: user_metadata must be an object")
    version = user_metadata.get(SCHEMA_VERSION_KEY)
    if version is not None and not _is_version(version):
        raise InventoryError(
            f"data_plane/metadata.json records {SCHEMA_VERSION_KEY}={version!r}; this reader knows "
            f"version {SCHEMA_VERSION} only: upgrade tq-gc to a release that reads it"
        )
    digest = user_metadata.get(DIGEST_KEY)
    if digest is None:
        return None
    if not isinstance(digest, str) or not _SHA256_HEX.match(digest):
        raise InventoryError(
            f"data_plane/metadata.json: {DIGEST_KEY} is {digest!r}, not a SHA-256 hex digest"
        )
    return digest


def _load(content: bytes) -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch comes with transferqueue
        raise InventoryError("reading it needs torch: pip install torch (the CPU build is enough)") from None
    try:
        return torch.load(io.BytesIO(content), weights_only=True, map_location="cpu")
    except Exception as exc:  # truncated, not a torch file, or a global weights-only loading refuses
        refused = _UNSUPPORTED_GLOBAL.search(str(exc))
        if refused or isinstance(exc, pickle.UnpicklingError):
            what = f"a Python object of {refused.group(1)}" if refused else "a Python object"
            raise InventoryError(
                f"holds {what}, which weights-only loading refuses (a checkpoint is never unpickled in "
                "full): NeMo RL wrote something this reader does not know"
            ) from None
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InventoryError(f"is not a readable torch file ({first_line})") from None


def _keys_of(inventory: Any) -> list[str]:
    if not isinstance(inventory, dict):
        raise InventoryError(f"holds {type(inventory).__name__}, not the inventory's dict")
    version = inventory.get("schema_version")
    if not _is_version(version):
        raise InventoryError(
            f"schema_version is {version!r}; this reader knows version {SCHEMA_VERSION} only: upgrade "
            "tq-gc to a release that reads it"
        )
    keys: list[str] = []
    for g, group in enumerate(_list_of_dicts(inventory, "groups", "")):
        for s, sibling in enumerate(_list_of_dicts(group, "siblings", f"groups[{g}]")):
            for a, attempt in enumerate(_list_of_dicts(sibling, "attempts", f"groups[{g}].siblings[{s}]")):
                keys.extend(_attempt_keys(attempt, f"groups[{g}].siblings[{s}].attempts[{a}]"))
    return keys


def _attempt_keys(attempt: Mapping[str, Any], where: str) -> list[str]:
    status = attempt.get("status")
    if status not in ATTEMPT_STATUSES:
        raise InventoryError(
            f"{where}.status is {status!r}, not one of {', '.join(sorted(ATTEMPT_STATUSES))} (schema "
            f"version {SCHEMA_VERSION})"
        )
    keys = attempt.get("staging_keys")
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise InventoryError(f"{where}.staging_keys must be a list of key strings")
    return keys


def _list_of_dicts(parent: Mapping[str, Any], name: str, where: str) -> list[Mapping[str, Any]]:
    value = parent.get(name)
    place = f"{where}.{name}" if where else name
    if not isinstance(value, list):
        raise InventoryError(f"{place} is {type(value).__name__}, not a list")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise InventoryError(f"{place}[{index}] is {type(item).__name__}, not a dict")
    return value


def _is_version(value: Any) -> bool:
    return type(value) is int and value == SCHEMA_VERSION


__all__ = ["INVENTORY_FILE", "SCHEMA_VERSION", "InventoryError", "in_progress_directories", "staging_keys"]
