"""The jsonl format's reader: JSON lines (blank lines ignored), the keys at the key path of each line."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from tq_gc.config import ManifestSource
from tq_gc.formats.manifest_formats import FORMATS
from tq_gc.references.manifests.text import TextFormatReader, load_json, rows_at_key_path
from tq_gc.rows import RowId


class JsonLinesReader(TextFormatReader):
    definition = FORMATS["jsonl"]

    def parse_text(self, stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
        rows: list[RowId] = []
        for line_number, line in enumerate(stream, start=1):
            if line.strip():
                record = load_json(line, path, line_number)
                rows.extend(rows_at_key_path(record, source, path, line_number))
        return rows
