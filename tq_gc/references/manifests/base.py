"""The interface of a manifest format's reader: one plugin per format (readers.py registers them).

A reader says which files a source's glob names, reads the bytes that make one manifest, parses the rows
they name, says what reads as empty to the emptied-sources guard, and what `tq-gc check` reports of a
source. What the config asks of a source of the format is its definition's
(tq_gc/formats/manifest_formats.py), which the reader names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from tq_gc.config import ManifestSource
from tq_gc.formats.manifest_formats import ManifestFormat
from tq_gc.references.globwalk import match_files
from tq_gc.rows import RowId


class ManifestBytes(Protocol):
    """What one manifest's rows are parsed from, as read for one sweep."""

    @property
    def vanished(self) -> bool:
        """Deleted since the walk: deleting a manifest releases its rows."""
        ...

    def digest(self) -> bytes:
        """Of every byte the rows are parsed from: the same digest, the same rows."""
        ...


BytesT = TypeVar("BytesT", bound=ManifestBytes)


@dataclass(frozen=True, slots=True)
class SourceSummary:
    """What `tq-gc check` reports for one source: what it matched and whether it reads in full."""

    glob: str
    format: str
    files: tuple[Path, ...]
    rows: int
    error: str | None = None
    in_progress: tuple[str, ...] = ()  # checkpoint directories being written (sweeps skip meanwhile)


class FormatReader(ABC, Generic[BytesT]):
    """How the manifests of one format are read."""

    definition: ManifestFormat
    # `tq-gc check`: True gives each source of this format a check of its own (check_detail); False counts
    # its rows in the one "manifests" check with the other such sources.
    checked_alone: bool = False

    def files(self, source: ManifestSource) -> tuple[Path, ...]:
        """The files `source.glob` matches now, sorted. UnreadablePath or ValueError when the listing
        cannot be complete; CheckpointInProgress when the format knows how a checkpoint being written
        looks, and one is there."""
        return match_files(source.glob)

    @abstractmethod
    def read(self, path: Path, source: ManifestSource) -> BytesT:
        """The bytes one matched file's rows are parsed from. ReferenceSourceError naming the file when
        they cannot be read."""

    @abstractmethod
    def rows(self, path: Path, found: BytesT, source: ManifestSource) -> list[RowId]:
        """The rows bytes that did not vanish name. ReferenceSourceError naming the file when they do not
        parse (a manifest misread as empty would release every row it protects)."""

    def reads_as_empty(self, files: Sequence[Path]) -> bool:
        """Whether a read that matched `files` reads as empty to the emptied-sources guard
        (references/emptied.py): no file at all, which is what an unmounted volume looks like. Files
        that are retired or name no rows are the publisher saying "release", and are believed."""
        return not files

    def check_detail(self, source: ManifestSource, summary: SourceSummary) -> str:
        """What `tq-gc check` says of a source of this format that reads in full (checked_alone)."""
        return f"{summary.rows} rows named"
