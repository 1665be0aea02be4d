"""The job's checkpoint manifests: native tq-gc/manifest/v1 files, written atomically."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path


def write_manifest(
    path: Path, manifest_id: str, rows: dict[str, Sequence[str]], state: str = "active"
) -> None:
    """A native tq-gc/manifest/v1 file, written atomically: a reader sees the old file or the new one."""
    doc = {
        "format": "tq-gc/manifest/v1",
        "manifest_id": manifest_id,
        "state": state,
        "rows": {partition: sorted(keys) for partition, keys in rows.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)
