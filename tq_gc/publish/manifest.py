"""The native manifest writer: what a checkpoint writes to name the rows a restore will still need.

    write_manifest("/ckpt/step-7/gc-manifest.json", "ckpt-7", {"rollout_staging": [key, ...]})
    write_manifest(path, "ckpt-7", {}, state="retired")    # or delete the file: its rows are released

A sweep reads a manifest as a whole or fails closed, so a half-written file must never be visible: the
document goes to a temporary file in the same directory, is flushed to disk, and replaces the manifest
in one rename (readers see the old file or the new one). The format itself (tq-gc/manifest/v1), shared
with the reader: tq_gc/formats/native_manifest.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tq_gc.formats.native_manifest import FORMAT as NATIVE_FORMAT
from tq_gc.formats.native_manifest import STATES as NATIVE_STATES
from tq_gc.formats.native_manifest import ManifestState, manifest_document

__all__ = ["NATIVE_FORMAT", "NATIVE_STATES", "manifest_document", "write_manifest"]


def write_manifest(
    path: str | Path,
    manifest_id: str,
    rows: Mapping[str, Sequence[str]],
    state: ManifestState = "active",
) -> Path:
    """Write a native manifest atomically (temporary file, fsync, rename); returns its path."""
    target = Path(path)
    text = json.dumps(manifest_document(manifest_id, rows, state))
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
