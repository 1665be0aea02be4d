"""The registry of manifest format readers: one per format the config knows (formats/manifest_formats.py)."""

from __future__ import annotations

from typing import Any

from tq_gc.config import ManifestSource
from tq_gc.references.manifests.base import FormatReader
from tq_gc.references.manifests.json_document import JsonDocumentReader
from tq_gc.references.manifests.json_lines import JsonLinesReader
from tq_gc.references.manifests.native import NativeReader
from tq_gc.references.manifests.nemo_rl_recovery import NemoRlRecoveryReader

READERS: dict[str, FormatReader[Any]] = {
    reader.definition.name: reader
    for reader in (NativeReader(), JsonDocumentReader(), JsonLinesReader(), NemoRlRecoveryReader())
}


def reader_of(source: ManifestSource) -> FormatReader[Any]:
    """The reader of the source's format."""
    return READERS[source.format]
