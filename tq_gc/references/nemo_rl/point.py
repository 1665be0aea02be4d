"""One recovery point (a trainer checkpoint or a rollout snapshot directory): its files, and the rows
NeMo RL's restore from it would keep.

    rollout_recovery.pt          the ledger (torch.save; schema 2, 3 or 4)    -> ledger.py
    data_plane/metadata.json     TQ's checkpoint metadata; `user_metadata` records the ledger's SHA-256
                                 and schema version, and, when authoritative, the replay index's digest
    replay_buffer_metadata.pt    the replay index (torch.save)                -> replay.py
    manifest.json                a snapshot's manifest, with NeMo Gym's state -> gym.py
    (the Gym files manifest.json names)

The restore set is the union of what each keeps (`_validate_rollout_recovery_inventory` in NeMo's
SingleController: the ledger's expected staging keys, the Gym checkpoint's staging keys, the
generation-cut keys of the manifest's proofs, the replay groups' route-plan cleanup keys), plus the
canonical rows the replay index and finalized groups own.

Order of writes decides what a missing file means. NeMo writes the ledger first, then TQ's save writes
`data_plane/` (its metadata naming the ledger's digest), then the replay index, then renames the
directory into place. So a ledger without its metadata is a save in progress (the sweep skips), and a
committed directory whose metadata advertises a file that is not there is broken (NeMo's own restore
refuses it: the source fails).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tq_gc.references.nemo_rl import gym, replay, schema2, schema3, schema4, torchfile
from tq_gc.references.nemo_rl.budget import KeyBudget
from tq_gc.references.nemo_rl.errors import InventoryError, SaveInProgress
from tq_gc.references.nemo_rl.layout import INVENTORY, SNAPSHOT
from tq_gc.references.nemo_rl.ledger import LedgerRows, schema_version
from tq_gc.rows import RowId

METADATA = "data_plane/metadata.json"
MANIFEST = "manifest.json"
DIGEST_KEY = "rollout_recovery_payload_sha256"
SCHEMA_VERSION_KEY = "rollout_recovery_schema_version"
READERS = {schema2.VERSION: schema2.rows, schema3.VERSION: schema3.rows, schema4.VERSION: schema4.rows}
KNOWN_VERSIONS = ", ".join(map(str, sorted(READERS)))


@dataclass(frozen=True, slots=True)
class PointFiles:
    """The bytes of a recovery point's files (None: absent), as read for one sweep."""

    directory: Path
    files: tuple[tuple[str, bytes | None], ...] = ()
    vanished: bool = False  # the directory is gone: pruned, it keeps nothing

    def get(self, name: str) -> bytes | None:
        return dict(self.files).get(name)

    def digest(self) -> bytes:
        digest = hashlib.blake2b(b"vanished" if self.vanished else b"present", digest_size=32)
        for name, content in self.files:
            digest.update(f"{name}\0{-1 if content is None else len(content)}\0".encode())
            digest.update(content or b"")
        return digest.digest()


def read_point(inventory: Path, read: Callable[[Path], bytes]) -> PointFiles:
    """The files of the recovery point `inventory` (its rollout_recovery.pt) belongs to, read with `read`
    (which raises OSError, FileNotFoundError for a file that is not there)."""
    directory = inventory.parent
    if not directory.is_dir():
        return PointFiles(directory, vanished=True)
    files = {name: _optional(directory / name, read) for name in (INVENTORY, METADATA, replay.FILE, MANIFEST)}
    for path in gym.artifact_paths(_json_or_none(files[MANIFEST])):
        files[path] = _optional(directory / path, read)
    if not directory.is_dir():
        return PointFiles(directory, vanished=True)
    return PointFiles(directory, tuple(sorted(files.items())))


def restore_rows(point: PointFiles, staging_partition: str) -> list[RowId]:
    """The rows a restore from this point keeps. InventoryError if NeMo's restore would refuse a file of
    it; SaveInProgress if it is still being written."""
    if point.vanished:
        return []
    found = LedgerRows()
    budget = KeyBudget()
    metadata = _user_metadata(point.get(METADATA))
    ledger = point.get(INVENTORY)
    if ledger is not None:
        if metadata is None:
            raise SaveInProgress(f"{point.directory} has {INVENTORY} but no {METADATA} yet")
        _merge(found, _ledger_rows(ledger, metadata, budget))
    elif metadata is not None and (DIGEST_KEY in metadata or SCHEMA_VERSION_KEY in metadata):
        raise InventoryError(
            f"{METADATA} advertises {INVENTORY}, which is missing: NeMo RL's restore refuses this checkpoint"
        )
    if metadata is not None and metadata.get("replay_manifest_digest") is not None:
        _merge(found, _replay_rows(point.get(replay.FILE), metadata, budget))
    _merge(found, LedgerRows(staging_keys=_gym_keys(point, budget)))
    elsewhere = sorted(found.named_partitions - {staging_partition})
    if elsewhere:
        raise InventoryError(
            f"its files stage rows in partition {', '.join(map(repr, elsewhere))}, but the source's "
            f"partition is {staging_partition!r}: set it to NeMo's token_capture.staging_partition"
        )
    rows = [RowId(staging_partition, key) for key in sorted(found.staging_keys)]
    for partition, keys in sorted(found.canonical.items()):
        rows.extend(RowId(partition, key) for key in sorted(keys))
    return rows


def _ledger_rows(content: bytes, metadata: Mapping[str, Any], budget: KeyBudget) -> LedgerRows:
    recorded_version = metadata.get(SCHEMA_VERSION_KEY)
    if recorded_version is not None:
        _check_known(recorded_version, f"{METADATA} records {SCHEMA_VERSION_KEY}={recorded_version!r}")
    digest = metadata.get(DIGEST_KEY)
    if digest is not None:
        found = hashlib.sha256(content).hexdigest()
        if found != digest:
            raise InventoryError(
                f"{INVENTORY}: SHA-256 is {found}, but {METADATA} records {digest!r}: the file is not the "
                "one the checkpoint committed"
            )
    state = _loaded(content, INVENTORY)
    try:
        version = schema_version(state)
    except InventoryError as exc:
        raise InventoryError(f"{INVENTORY}: {exc}") from None
    _check_known(version, f"{INVENTORY}: schema_version is {version}")
    if recorded_version is not None and recorded_version != version:
        raise InventoryError(f"{INVENTORY} is schema {version}, but {METADATA} records {recorded_version}")
    try:
        return READERS[version](state, budget)
    except InventoryError as exc:
        raise InventoryError(f"{INVENTORY} (schema {version}): {exc}") from None


def _check_known(version: Any, what: str) -> None:
    if type(version) is int and version in READERS:
        return
    raise InventoryError(f"{what}; this reader knows schema versions {KNOWN_VERSIONS}: upgrade tq-gc")


def _replay_rows(content: bytes | None, metadata: Mapping[str, Any], budget: KeyBudget) -> LedgerRows:
    if content is None:
        raise InventoryError(
            f"{METADATA} records a replay index (replay_manifest_digest), but {replay.FILE} is missing: "
            "NeMo RL's restore refuses this checkpoint"
        )
    return replay.rows(_loaded(content, replay.FILE), metadata, budget)


def _gym_keys(point: PointFiles, budget: KeyBudget) -> set[str]:
    content = point.get(MANIFEST)
    if content is None:
        if SNAPSHOT.fullmatch(point.directory.name):
            raise InventoryError(f"the committed snapshot has no {MANIFEST}: NeMo RL's restore refuses it")
        return set()
    try:
        manifest = json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise InventoryError(f"{MANIFEST} is not valid JSON ({exc})") from None
    files = {
        name: data for name, data in point.files if name not in (INVENTORY, METADATA, replay.FILE, MANIFEST)
    }
    return gym.staging_keys(manifest, files, budget)


def _loaded(content: bytes, name: str) -> Any:
    try:
        return torchfile.load(content)
    except InventoryError as exc:
        raise InventoryError(f"{name} {exc}") from None


def _user_metadata(content: bytes | None) -> dict[str, Any] | None:
    if content is None:
        return None
    try:
        document = json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise InventoryError(f"{METADATA} is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise InventoryError(f"{METADATA} must hold a JSON object")
    user_metadata = document.get("user_metadata", {})
    if not isinstance(user_metadata, dict):
        raise InventoryError(f"{METADATA}: user_metadata must be an object")
    digest = user_metadata.get(DIGEST_KEY)
    if digest is not None and not (
        isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef")
    ):
        raise InventoryError(f"{METADATA}: {DIGEST_KEY} is {digest!r}, not a SHA-256 hex digest")
    return user_metadata


def _merge(into: LedgerRows, more: LedgerRows) -> None:
    into.staging_keys |= more.staging_keys
    into.named_partitions |= more.named_partitions
    for partition, keys in more.canonical.items():
        into.canonical.setdefault(partition, set()).update(keys)


def _optional(path: Path, read: Callable[[Path], bytes]) -> bytes | None:
    try:
        return read(path)
    except FileNotFoundError:
        return None


def _json_or_none(content: bytes | None) -> Any:
    try:
        return json.loads(content) if content is not None else None
    except (ValueError, RecursionError):
        return None  # restore_rows reports it
