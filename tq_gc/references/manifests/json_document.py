"""The json format's reader: one JSON document per file, its keys at the source's key path."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from tq_gc.config import ManifestSource
from tq_gc.formats.manifest_formats import FORMATS
from tq_gc.references.manifests.text import TextFormatReader, load_json, rows_at_key_path
from tq_gc.rows import RowId


class JsonDocumentReader(TextFormatReader):
    definition = FORMATS["json"]

    def parse_text(self, stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
        return rows_at_key_path(load_json(stream.read(), path), source, path)
