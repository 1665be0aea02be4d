"""Reading a manifest file's bytes, failing the source clearly.

Only regular files of at most `ManifestSource.max_file_bytes` (64 MiB) are read; a FIFO, socket, device or
directory that matches fails the source, unopened (opening a FIFO would block the sweep forever).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tq_gc.errors import ReferenceSourceError
from tq_gc.referenced import Source

_FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@dataclass(frozen=True, slots=True)
class FileBytes:
    """What one manifest's rows are parsed from: its bytes. `vanished`: the file was deleted since the
    walk (it then holds no rows)."""

    content: bytes = b""
    vanished: bool = False

    def digest(self) -> bytes:
        digest = hashlib.blake2b(self.content, digest_size=32)
        digest.update(b"vanished" if self.vanished else b"read")
        return digest.digest()


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file `path`; OSError, or ReferenceSourceError if it is no regular file
    or larger than `max_bytes`."""
    _check_regular_file(path, os.stat(path), max_bytes)  # before opening: opening a FIFO blocks
    # O_NONBLOCK: should the file be swapped for a FIFO after the stat, the open still returns.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(descriptor, "rb") as stream:
        _check_regular_file(path, os.fstat(descriptor), max_bytes)
        content = stream.read(max_bytes + 1)
    if len(content) > max_bytes:
        raise file_error(path, f"grew past max_file_bytes={max_bytes} while being read")
    return content


def _check_regular_file(path: Path, found: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(found.st_mode):
        kind = _FILE_TYPES.get(stat.S_IFMT(found.st_mode), "of an unknown type")
        raise file_error(path, f"is {kind}, not a regular file")
    if found.st_size > max_bytes:
        raise file_error(
            path,
            f"is {found.st_size} bytes, over the {max_bytes}-byte limit of a manifest file: a runaway "
            "or wrong file (split what the job writes)",
        )


def file_error(path: Path, what: str, line_number: int | None = None) -> ReferenceSourceError:
    """The manifests source failed at `path` (and line): `what` says how."""
    place = f"{path} line {line_number}" if line_number is not None else str(path)
    return ReferenceSourceError(Source.MANIFESTS.value, f"{place}: {what}")
