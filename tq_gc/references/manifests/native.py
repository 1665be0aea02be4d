"""The native format's reader: a tq-gc/manifest/v1 document, parsed by its definition
(tq_gc/formats/native_manifest.py, which the writer tq_gc.write_manifest uses too)."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from tq_gc.config import ManifestSource
from tq_gc.formats import native_manifest
from tq_gc.formats.manifest_formats import FORMATS
from tq_gc.references.manifests.files import file_error
from tq_gc.references.manifests.text import TextFormatReader, load_json
from tq_gc.rows import RowId


class NativeReader(TextFormatReader):
    definition = FORMATS["native"]

    def parse_text(self, stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
        document = load_json(stream.read(), path)
        try:
            rows = native_manifest.named_rows(document)
        except ValueError as exc:
            raise file_error(path, str(exc)) from None
        return [RowId(partition, key) for partition, key in rows]
