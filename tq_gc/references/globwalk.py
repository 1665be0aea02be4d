"""Find the files an absolute glob matches, failing closed and bounded.

`glob.glob` swallows OSError: an unmounted volume, EIO/ESTALE/EACCES while walking and a dangling symlink
all read as "no files", and under `**` it follows symlinked directories into loops. Here:

- the base (the literal directory prefix before the first wildcard) must exist and be a directory;
- a directory that cannot be listed, or a symlink the pattern matches or could walk through that resolves
  to nothing, raises UnreadablePath: a listing that may be incomplete is no listing;
- a directory removed after its parent was listed holds nothing (it was pruned, like a deleted file);
- each directory is walked at most once per pattern position, keyed by (st_dev, st_ino): symlink loops end
  and a directory reached through several links is listed once.

Matching otherwise follows `glob.glob(recursive=True)`: `**` as a whole component is any number of
directories, and a wildcard does not match a name starting with '.' unless its component starts with '.'.
What a match is (a regular file or not) is the reader's business. The pattern itself: formats/globs.py.
"""

from __future__ import annotations

import errno
import os
import stat
from fnmatch import fnmatchcase
from pathlib import Path

from tq_gc.formats.globs import ANY_DEPTH, WILDCARD, Pattern


class UnreadablePath(Exception):
    """A path the pattern could match through cannot be read, so the listing would be incomplete."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def match_files(glob: str) -> tuple[Path, ...]:
    """Every path an absolute `glob` matches, sorted. Raises UnreadablePath (see the module docstring)."""
    return _Walk(Pattern.parse(glob)).run()


class _Walk:
    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self.matches: set[str] = set()
        self.walked: set[tuple[int, int, int]] = set()
        # (directory, its stat, index of the pattern part to apply in it); popped last-in first-out
        self.pending: list[tuple[str, os.stat_result, int]] = []

    def run(self) -> tuple[Path, ...]:
        self.pending.append((self.pattern.base, _base_stat(self.pattern.base), 0))
        while self.pending:
            directory, directory_stat, index = self.pending.pop()
            walk_key = (directory_stat.st_dev, directory_stat.st_ino, index)
            if walk_key not in self.walked:
                self.walked.add(walk_key)
                self._step(directory, index)
        return tuple(sorted(Path(match) for match in self.matches))

    def _step(self, directory: str, index: int) -> None:
        part = self.pattern.parts[index]
        descend: list[tuple[str, os.stat_result, int]] = []
        if part == ANY_DEPTH:
            entries = self._list(directory)
            for entry in entries:
                if _matches(entry.name, "*") and (found := _directory_stat(entry.path, entry)):
                    descend.append((entry.path, found, index))
            descend += self._apply(entries, index + 1)  # `**` as zero directories
        elif WILDCARD.search(part):
            descend += self._apply(self._list(directory), index)
        else:
            descend += self._candidate(os.path.join(directory, part), None, index)
        self.pending.extend(reversed(descend))  # walk in name order: the first of two aliases wins

    def _apply(self, entries: list[os.DirEntry[str]], index: int) -> list[tuple[str, os.stat_result, int]]:
        part = self.pattern.parts[index]
        descend = []
        for entry in entries:
            if _matches(entry.name, part):
                descend += self._candidate(entry.path, entry, index)
        return descend

    def _candidate(
        self, path: str, entry: os.DirEntry[str] | None, index: int
    ) -> list[tuple[str, os.stat_result, int]]:
        """A path matching part `index`: a match if it is the last part, else a directory to walk."""
        if index == len(self.pattern.parts) - 1:
            if (entry is not None and not entry.is_symlink()) or _follow(path) is not None:
                self.matches.add(path)
            return []
        found = _directory_stat(path, entry)
        return [(path, found, index + 1)] if found else []

    def _list(self, directory: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as listing:
                return sorted(listing, key=lambda entry: entry.name)
        except FileNotFoundError as exc:
            if directory == self.pattern.base:
                raise UnreadablePath(directory, unreadable(exc)) from exc
            return []  # removed since its parent was listed: a pruned checkpoint holds no manifests
        except OSError as exc:
            raise UnreadablePath(directory, unreadable(exc)) from exc


def check_volume(base: str, marker: str | None) -> None:
    """Raise UnreadablePath unless the volume under `base` looks healthy: `marker` (a path relative to
    `base`) is a regular file.

    An unmounted volume leaves its mount point behind, an empty directory: to a walk it reads as a
    volume holding no manifests."""
    if marker is not None:
        path = os.path.join(base, marker)
        found = _follow(path)
        if found is None:
            raise UnreadablePath(
                path,
                f"marker {marker!r} is missing under {base} (on the file system mounted at "
                f"{enclosing_mount(base)}): is the volume mounted? A healthy volume carries this file",
            )
        if not stat.S_ISREG(found.st_mode):
            raise UnreadablePath(path, f"marker {marker!r} is not a regular file")


def enclosing_mount(path: str) -> str:
    """The mount point of the file system `path` (or its nearest existing parent) is on."""
    current = os.path.abspath(path)
    while not os.path.exists(current) or not os.path.ismount(current):
        current = os.path.dirname(current)
    return current


def _matches(name: str, part: str) -> bool:
    return fnmatchcase(name, part) and (not name.startswith(".") or part.startswith("."))


def _base_stat(base: str) -> os.stat_result:
    found = _follow(base)
    if found is None:
        raise UnreadablePath(base, "the base directory does not exist: is the checkpoint volume mounted?")
    if not stat.S_ISDIR(found.st_mode):
        raise UnreadablePath(base, "the base directory is not a directory")
    return found


def _directory_stat(path: str, entry: os.DirEntry[str] | None) -> os.stat_result | None:
    """The stat of the directory `path` names (following symlinks); None if it is no directory or gone."""
    if entry is not None and not entry.is_symlink():
        if not entry.is_dir(follow_symlinks=False):
            return None  # the file type comes with the listing: no stat for every file walked
        try:
            return entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise UnreadablePath(path, unreadable(exc)) from exc
    found = _follow(path)
    return found if found is not None and stat.S_ISDIR(found.st_mode) else None


def _follow(path: str) -> os.stat_result | None:
    """What `path` names, following symlinks; None if nothing is there. A symlink to nothing raises."""
    try:
        return os.stat(path)
    except FileNotFoundError as exc:
        if os.path.islink(path):
            raise UnreadablePath(path, f"is a dangling symlink (to {_link_target(path)})") from exc
        return None
    except OSError as exc:
        raise UnreadablePath(path, unreadable(exc)) from exc


def _link_target(path: str) -> str:
    try:
        return repr(os.readlink(path))
    except OSError:
        return "an unreadable target"


def unreadable(exc: OSError) -> str:
    """`cannot be read (EACCES: Permission denied)`: the errno name is what operators search for."""
    code = errno.errorcode.get(exc.errno or 0, "error")
    return f"cannot be read ({code}: {exc.strerror or exc})"
