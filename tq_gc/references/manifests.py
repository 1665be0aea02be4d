"""Recovery manifests: files on a shared filesystem naming the rows a restore will still need.

Formats (DESIGN.md, "Native manifest format"):

| format           | one file is                        | rows                                            |
|------------------|------------------------------------|-------------------------------------------------|
| native           | a tq-gc/manifest/v1 JSON document  | `rows` {partition: [keys]}, none once `retired` |
| json             | one JSON document                  | keys at `key_path`, in the source's `partition` |
| jsonl            | JSON lines (blank lines ignored)   | keys at `key_path` of each line                 |
| nemo_rl_recovery | a NeMo RL recovery point's files    | what NeMo RL's restore from it keeps            |

The nemo_rl_recovery reader (its own package: nemo_rl/) reads every trainer checkpoint and rollout
snapshot under the glob's base directory (NeMo's checkpoint_dir), one recovery point per
`rollout_recovery.pt` path; while a save is being written (`tmp_step_N`, `old_step_N`,
`tmp_snapshot_N`, a ledger without its metadata) the sweep skips (CheckpointInProgress).

Files are found by `globwalk.match_files` (fail closed: a missing base directory, a directory that cannot
be listed, a dangling symlink on the way all fail the source; symlink loops end). Only regular files of at
most the source's `max_file_bytes` are read; a FIFO, socket, device or directory that matches fails the
source, unopened (opening a FIFO would block the sweep forever).

Deleting a manifest releases its rows, so a file that vanishes between the walk and the open holds none.
Any other failure (unreadable, too large, not JSON, nested too deeply, wrong schema, wrong type at the key
path) fails the whole source: a manifest misread as empty would release every row it protects.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tq_gc.config import ManifestSource
from tq_gc.errors import CheckpointInProgress, ConfigError, ReferenceSourceError
from tq_gc.model import KeysByPartition, RowId, Source, group_by_partition, merge_keys
from tq_gc.publish.manifest import NATIVE_FORMAT, NATIVE_STATES
from tq_gc.references import nemo_rl
from tq_gc.references.emptied import Yield
from tq_gc.references.globwalk import UnreadablePath, check_volume, match_files, unreadable
from tq_gc.references.keypath import extract_keys, split_key_path

# A sweep reads the manifests twice, before and after its listing (sweep.observe.Observer.read).
READS_PER_SWEEP = 2

_FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@dataclass(frozen=True, slots=True)
class MatchedFiles:
    """The files one configured source's glob matches now, sorted."""

    source: ManifestSource
    files: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class SourceSummary:
    """What `tq-gc check` reports for one source: what it matched and whether it reads in full."""

    glob: str
    format: str
    files: tuple[Path, ...]
    rows: int
    error: str | None = None
    in_progress: tuple[str, ...] = ()  # checkpoint directories being written (sweeps skip meanwhile)


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
            yields[source.source_id] = _yield_of(files)
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
        found = _file_bytes(path, source)
        digest = found.digest()
        kept = self._parsed.get((index, path))
        if kept is not None and kept.digest == digest:
            return kept
        return ParsedFile(path, digest, group_by_partition(_parse(path, found, source)))

    def describe(self) -> list[SourceSummary]:
        """Read each source on its own and report instead of raising (for `tq-gc check`)."""
        return [_describe(source) for source in self._sources]


def _yield_of(files: Sequence[ParsedFile]) -> Yield:
    return Yield(sum(len(keys) for file in files for keys in file.rows.values()), reads_as_empty=not files)


def _match(source: ManifestSource) -> MatchedFiles:
    """The files `source.glob` matches now, or ReferenceSourceError naming the path and the OS error.
    CheckpointInProgress if the format knows how a checkpoint being written looks, and one is there."""
    try:
        check_volume(source.base, source.marker, source.mount_point)
        if source.format == "nemo_rl_recovery":
            return MatchedFiles(source, nemo_rl.recovery_files(source.glob))
        return MatchedFiles(source, match_files(source.glob))
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
            f"glob {source.glob!r} {found}, but the source is expect_nonempty: check the path and that "
            "the job writes its manifests there",
        )


@dataclass(frozen=True, slots=True)
class FileBytes:
    """What one manifest's rows are parsed from: its bytes (a NeMo RL recovery point: nemo_rl.PointFiles).
    `vanished`: the file was deleted since the walk (it then holds no rows)."""

    content: bytes = b""
    vanished: bool = False

    def digest(self) -> bytes:
        digest = hashlib.blake2b(self.content, digest_size=32)
        digest.update(b"vanished" if self.vanished else b"read")
        return digest.digest()


@dataclass(frozen=True, slots=True)
class ParsedFile:
    """One manifest's rows, and the digest of the bytes they were parsed from."""

    path: Path
    digest: bytes
    rows: KeysByPartition


def read_manifest(path: Path, source: ManifestSource) -> list[RowId]:
    """The rows one manifest file references. Raises ReferenceSourceError naming the file."""
    return _parse(path, _file_bytes(path, source), source)


def _file_bytes(path: Path, source: ManifestSource) -> FileBytes | nemo_rl.PointFiles:
    if source.format == "nemo_rl_recovery":
        return _recovery_point_bytes(path, source)
    try:
        content = _read_regular_file(path, source.max_file_bytes)
    except FileNotFoundError:
        return FileBytes(vanished=True)  # deleted since the walk: deleting a manifest releases its rows
    except OSError as exc:
        raise _file_error(path, unreadable(exc)) from exc
    return FileBytes(content)


def _recovery_point_bytes(path: Path, source: ManifestSource) -> nemo_rl.PointFiles:
    try:
        return nemo_rl.read_point(path, lambda file: _read_regular_file(file, source.max_file_bytes))
    except OSError as exc:
        raise _file_error(Path(exc.filename) if exc.filename else path.parent, unreadable(exc)) from exc


def _parse(path: Path, found: FileBytes | nemo_rl.PointFiles, source: ManifestSource) -> list[RowId]:
    if found.vanished:
        return []
    if isinstance(found, nemo_rl.PointFiles):
        return _parse_nemo_rl_point(found, source)
    parse = _PARSERS[source.format]
    try:
        return parse(io.TextIOWrapper(io.BytesIO(found.content), encoding="utf-8"), path, source)
    except UnicodeDecodeError as exc:
        raise _file_error(path, f"is not UTF-8 text ({exc.reason})") from exc


def _parse_nemo_rl_point(found: nemo_rl.PointFiles, source: ManifestSource) -> list[RowId]:
    assert source.partition is not None, "the config defaults it"
    try:
        return nemo_rl.restore_rows(found, source.partition)
    except nemo_rl.SaveInProgress as exc:
        raise CheckpointInProgress(source.glob, [str(found.directory)]) from exc
    except nemo_rl.InventoryError as exc:
        raise _file_error(found.directory, str(exc)) from None


def _read_regular_file(path: Path, max_bytes: int) -> bytes:
    _check_regular_file(path, os.stat(path), max_bytes)  # before opening: opening a FIFO blocks
    # O_NONBLOCK: should the file be swapped for a FIFO after the stat, the open still returns.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(descriptor, "rb") as stream:
        _check_regular_file(path, os.fstat(descriptor), max_bytes)
        content = stream.read(max_bytes + 1)
    if len(content) > max_bytes:
        raise _file_error(path, f"grew past max_file_bytes={max_bytes} while being read")
    return content


def _check_regular_file(path: Path, found: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(found.st_mode):
        kind = _FILE_TYPES.get(stat.S_IFMT(found.st_mode), "of an unknown type")
        raise _file_error(path, f"is {kind}, not a regular file")
    if found.st_size > max_bytes:
        raise _file_error(
            path,
            f"is {found.st_size} bytes, over max_file_bytes={max_bytes}: raise the source's limit if "
            "the job really writes manifests this large",
        )


def _parse_native(stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
    document = _load_json(stream.read(), path)
    if not isinstance(document, dict):
        raise _file_error(path, f"must hold a JSON object, not {type(document).__name__}")
    if document.get("format") != NATIVE_FORMAT:
        raise _file_error(path, f"format is {document.get('format')!r}, expected {NATIVE_FORMAT!r}")
    if not isinstance(document.get("manifest_id"), str):
        raise _file_error(path, f"manifest_id is {document.get('manifest_id')!r}, expected a string")
    state = document.get("state")
    if state not in NATIVE_STATES:
        raise _file_error(path, f"state is {state!r}, expected one of {', '.join(NATIVE_STATES)}")
    if state == "retired" and "rows" not in document:
        return []
    rows = _native_rows(document.get("rows"), path)
    return [] if state == "retired" else rows


def _native_rows(table: Any, path: Path) -> list[RowId]:
    if not isinstance(table, dict):
        raise _file_error(path, "rows must be an object {partition: [keys]}")
    rows: list[RowId] = []
    for partition, keys in table.items():
        if not isinstance(keys, list):
            raise _file_error(path, f"rows[{partition!r}] must be a list of keys")
        for index, key in enumerate(keys):
            if not isinstance(key, str):
                raise _file_error(path, f"rows[{partition!r}][{index}] is {key!r}, expected a key string")
            rows.append(RowId(partition, key))
    return rows


def _parse_json(stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
    return _rows_at_key_path(_load_json(stream.read(), path), source, path)


def _parse_jsonl(stream: IO[str], path: Path, source: ManifestSource) -> list[RowId]:
    rows: list[RowId] = []
    for line_number, line in enumerate(stream, start=1):
        if line.strip():
            record = _load_json(line, path, line_number)
            rows.extend(_rows_at_key_path(record, source, path, line_number))
    return rows


def _rows_at_key_path(
    document: Any, source: ManifestSource, path: Path, line_number: int | None = None
) -> list[RowId]:
    # The config guarantees both for json/jsonl; checked again so a hand-built source fails clearly.
    if source.key_path is None or source.partition is None:
        raise _file_error(path, f"format {source.format!r} needs key_path and partition in the config")
    try:
        keys = extract_keys(document, source.key_path)
    except ValueError as exc:
        raise _file_error(path, str(exc), line_number) from None
    return [RowId(source.partition, key) for key in keys]


def _load_json(text: str, path: Path, line_number: int | None = None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if line_number is not None else f"line {exc.lineno} column {exc.colno}"
        raise _file_error(path, f"is not valid JSON ({exc.msg} at {where})", line_number) from None
    except ValueError as exc:  # an integer beyond the interpreter's digit limit
        raise _file_error(path, f"is not valid JSON ({exc})", line_number) from None
    except RecursionError:  # a "JSON bomb" such as '[' * 100000
        raise _file_error(path, "is nested too deeply to parse", line_number) from None


def _file_error(path: Path, what: str, line_number: int | None = None) -> ReferenceSourceError:
    place = f"{path} line {line_number}" if line_number is not None else str(path)
    return ReferenceSourceError(Source.MANIFESTS.value, f"{place}: {what}")


_Parser = Callable[[IO[str], Path, ManifestSource], list[RowId]]
_PARSERS: dict[str, _Parser] = {"native": _parse_native, "json": _parse_json, "jsonl": _parse_jsonl}
