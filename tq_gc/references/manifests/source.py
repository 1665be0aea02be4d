"""Recovery manifests as a reference source: every row the configured manifest files name, read in full.

Each source's files are found and parsed by its format's reader (readers.py; the formats are listed in
tq_gc/formats/manifest_formats.py). Files are found by `globwalk.match_files` (fail closed: a missing
base directory, a directory that cannot be listed, a dangling symlink on the way all fail the source;
symlink loops end) unless the format walks its own layout.

Deleting a manifest releases its rows, so a file that vanishes between the walk and the open holds none.
Any other failure (unreadable, too large, not JSON, nested too deeply, wrong schema, wrong type at the key
path) fails the whole source: a manifest misread as empty would release every row it protects.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tq_gc.config import ManifestSource
from tq_gc.errors import CheckpointInProgress, ConfigError, ReferenceSourceError
from tq_gc.formats.keypath import split_key_path
from tq_gc.referenced import Source
from tq_gc.references.emptied import Yield
from tq_gc.references.globwalk import UnreadablePath, check_volume
from tq_gc.references.manifests.base import ManifestBytes, SourceSummary
from tq_gc.references.manifests.readers import reader_of
from tq_gc.rows import KeysByPartition, RowId, group_by_partition, merge_keys

# A sweep reads the manifests twice, before and after its listing (sweep.observe.Observer.read).
READS_PER_SWEEP = 2


@dataclass(frozen=True, slots=True)
class MatchedFiles:
    """The files one configured source's glob matches now, sorted."""

    source: ManifestSource
    files: tuple[Path, ...]


class ManifestsSource:
    """Every row named by the configured manifest files (absolute globs: the config refuses others)."""

    name: str = Source.MANIFESTS.value

    def __init__(self, sources: Sequence[ManifestSource]) -> None:
        for source in sources:
            if source.key_path is not None:
                try:
                    split_key_path(source.key_path)
                except ValueError as exc:
                    raise ConfigError(f"manifests: glob {source.glob!r}: {exc}") from None
        self._sources = tuple(sources)
        self._parsed: dict[tuple[int, Path], ParsedFile] = {}  # (source index, path) -> as last read
        self._merged: tuple[tuple[tuple[int, Path, bytes], ...], KeysByPartition] | None = None
        # {source_id: what it yielded} of each of the last reads: a sweep's two (sweep/observe.py)
        self._yields: deque[dict[str, Yield]] = deque(maxlen=READS_PER_SWEEP)

    def files(self) -> list[MatchedFiles]:
        """The files each source matches, in config order, or ReferenceSourceError naming what failed."""
        return [_match(source) for source in self._sources]

    def read(self) -> KeysByPartition:
        """{partition: keys} every matched manifest references, or ReferenceSourceError.

        A file whose bytes (for a NeMo RL recovery point, all its files') are those it had at the last
        read is not parsed again: its rows are kept by the digest of those bytes, so a file rewritten
        in place with the same size and times is still read afresh. Reading the bytes is cheap; parsing
        them is not (at 1M rows, four native manifests naming 100,000 keys: ~140 ms, twice a sweep)."""
        read: dict[tuple[int, Path], ParsedFile] = {}
        yields: dict[str, Yield] = {}
        for index, source in enumerate(self._sources):
            matched = _match(source)
            files = [self._parsed_file(index, path, source) for path in matched.files]
            read.update(((index, file.path), file) for file in files)
            _check_expected(matched, any(file.rows for file in files))
            yields[source.source_id] = _yield_of(source, files)
        self._parsed = read
        self._yields.append(yields)
        digests = tuple((index, path, file.digest) for (index, path), file in read.items())
        if self._merged is None or self._merged[0] != digests:
            self._merged = (digests, merge_keys(*(file.rows for file in read.values())))
        return self._merged[1]

    def yields(self) -> dict[str, Yield]:
        """What each source yielded over the last reads (a sweep's two): it reads as empty when its glob
        matched no file in either."""
        merged: dict[str, Yield] = {}
        for read in self._yields:
            for source_id, found in read.items():
                kept = merged.get(source_id)
                merged[source_id] = found if kept is None else kept.merged(found)
        return merged

    def _parsed_file(self, index: int, path: Path, source: ManifestSource) -> ParsedFile:
        """The file's rows: kept from the last read if its bytes are the same, else parsed now."""
        found = reader_of(source).read(path, source)
        digest = found.digest()
        kept = self._parsed.get((index, path))
        if kept is not None and kept.digest == digest:
            return kept
        return ParsedFile(path, digest, group_by_partition(_parse(path, found, source)))

    def describe(self) -> list[SourceSummary]:
        """Read each source on its own and report instead of raising (for `tq-gc check`)."""
        return [_describe(source) for source in self._sources]


def _yield_of(source: ManifestSource, files: Sequence[ParsedFile]) -> Yield:
    references = sum(len(keys) for file in files for keys in file.rows.values())
    return Yield(references, reads_as_empty=reader_of(source).reads_as_empty([file.path for file in files]))


def _match(source: ManifestSource) -> MatchedFiles:
    """The files `source.glob` matches now, or ReferenceSourceError naming the path and the OS error.
    CheckpointInProgress if the format knows how a checkpoint being written looks, and one is there."""
    try:
        check_volume(source.base, source.marker)
        return MatchedFiles(source, reader_of(source).files(source))
    except (UnreadablePath, ValueError) as exc:
        raise ReferenceSourceError(Source.MANIFESTS.value, f"glob {source.glob!r}: {exc}") from exc


def _describe(source: ManifestSource) -> SourceSummary:
    files: tuple[Path, ...] = ()
    try:
        files = _match(source).files
        rows = len(_read_matched(MatchedFiles(source, files)))
    except ReferenceSourceError as exc:
        return SourceSummary(source.glob, source.format, files, 0, exc.detail)
    except CheckpointInProgress as exc:
        return SourceSummary(source.glob, source.format, files, 0, str(exc), tuple(exc.directories))
    return SourceSummary(source.glob, source.format, files, rows)


def _read_matched(matched: MatchedFiles) -> set[RowId]:
    rows: set[RowId] = set()
    for path in matched.files:
        rows.update(read_manifest(path, matched.source))
    _check_expected(matched, bool(rows))
    return rows


def _check_expected(matched: MatchedFiles, found_rows: bool) -> None:
    source = matched.source
    if source.expect_nonempty and not found_rows:
        found = "matched no files"
        if matched.files:
            found = f"matched {len(matched.files)} file(s) holding no rows"
        raise ReferenceSourceError(
            Source.MANIFESTS.value,
            f"glob {source.glob!r} {found}, but the source has when_empty: abort: check the path and that "
            "the job writes its manifests there",
        )


@dataclass(frozen=True, slots=True)
class ParsedFile:
    """One manifest's rows, and the digest of the bytes they were parsed from."""

    path: Path
    digest: bytes
    rows: KeysByPartition


def read_manifest(path: Path, source: ManifestSource) -> list[RowId]:
    """The rows one manifest file references. Raises ReferenceSourceError naming the file."""
    return _parse(path, reader_of(source).read(path, source), source)


def _parse(path: Path, found: ManifestBytes, source: ManifestSource) -> list[RowId]:
    if found.vanished:
        return []
    return reader_of(source).rows(path, found, source)
