"""The manifest formats that are UTF-8 JSON text (native, json, jsonl): one file is one manifest."""

from __future__ import annotations

import io
import json
from abc import abstractmethod
from pathlib import Path
from typing import IO, Any

from tq_gc.config import ManifestSource
from tq_gc.formats.keypath import extract_keys
from tq_gc.references.globwalk import unreadable
from tq_gc.references.manifests.base import FormatReader
from tq_gc.references.manifests.files import FileBytes, file_error, read_regular_file
from tq_gc.rows import RowId


class TextFormatReader(FormatReader[FileBytes]):
    """A format whose every matched file is one manifest, read whole and parsed as text."""

    def read(self, path: Path, source: ManifestSource) -> FileBytes:
        try:
            content = read_regular_file(path, source.max_file_bytes)
        except FileNotFoundError:
            return FileBytes(vanished=True)  # deleted since the walk: deleting a manifest releases its rows
        except OSError as exc:
            raise file_error(path, unreadable(exc)) from exc
        return FileBytes(content)

    def rows(self, path: Path, found: FileBytes, source: ManifestSource) -> list[RowId]:
        try:
            return self.parse_text(
                io.TextIOWrapper(io.BytesIO(found.content), encoding="utf-8"), path, source
            )
        except UnicodeDecodeError as exc:
            raise file_error(path, f"is not UTF-8 text ({exc.reason})") from exc

    @abstractmethod
    def parse_text(self, stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
        """The rows the text names; ReferenceSourceError naming the file (and line) where it is wrong."""


def load_json(text: str, path: Path, line_number: int | None = None) -> Any:
    """The JSON value `text` holds, or ReferenceSourceError naming the file (and line) and what is wrong."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if line_number is not None else f"line {exc.lineno} column {exc.colno}"
        raise file_error(path, f"is not valid JSON ({exc.msg} at {where})", line_number) from None
    except ValueError as exc:  # an integer beyond the interpreter's digit limit
        raise file_error(path, f"is not valid JSON ({exc})", line_number) from None
    except RecursionError:  # a "JSON bomb" such as '[' * 100000
        raise file_error(path, "is nested too deeply to parse", line_number) from None


def rows_at_key_path(
    document: Any, source: ManifestSource, path: Path, line_number: int | None = None
) -> list[RowId]:
    """The rows named at the source's key path in `document`, all in the source's partition."""
    # The config guarantees both for json/jsonl; checked again so a hand-built source fails clearly.
    if source.key_path is None or source.partition is None:
        raise file_error(path, f"format {source.format!r} needs key_path and partition in the config")
    try:
        keys = extract_keys(document, source.key_path)
    except ValueError as exc:
        raise file_error(path, str(exc), line_number) from None
    return [RowId(source.partition, key) for key in keys]
