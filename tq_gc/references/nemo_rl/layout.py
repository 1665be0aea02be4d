"""Where NeMo RL keeps what a restore may start from, under its `checkpointing.checkpoint_dir`.

    step_N/                                     a trainer checkpoint (CheckpointManager)
    tmp_step_N/, old_step_N/                    a save in progress, a step being replaced
    step_N/rollout_snapshots/snapshot_NNNNNN/   a periodic rollout snapshot of step_N's lineage
    step_N/rollout_snapshots/tmp_snapshot_NNNNNN/    being written (renamed to snapshot_ when done)
    step_N/rollout_snapshots/trash_snapshot_NNNNNN/  pruned (renamed, then removed): not read
    bootstrap/rollout_snapshots/...             the same, before the first trainer checkpoint

Every `step_N` is a recovery point (NeMo restores the newest; an older one once the newer are removed,
or with another restore mode), and so is each snapshot NeMo's restore would accept (selection.py: one it
passes over protects nothing; an anchor whose snapshots it would all pass over fails, as its restore
stops); bootstrap snapshots only while no `step_N` exists. Each one's rows are kept until it is pruned.
A `tmp_`/`old_` directory means a save is writing rows' references that cannot be read yet: the sweep
skips (it also covers NeMo's own TQ save, which must not see a clear: see the package docstring). An
entry named as a point that is a dangling symlink or cannot be looked at fails the source.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tq_gc.errors import CheckpointInProgress
from tq_gc.formats.globs import Pattern
from tq_gc.formats.manifest_formats import NEMO_RL_INVENTORY
from tq_gc.references.globwalk import UnreadablePath, unreadable
from tq_gc.references.nemo_rl import selection

INVENTORY = NEMO_RL_INVENTORY  # the file naming a recovery point, as the config checks a glob for it
SNAPSHOTS = "rollout_snapshots"
BOOTSTRAP = "bootstrap"
_STEP = re.compile(r"step_\d+")
_STEP_WRITING = re.compile(r"(?:tmp|old)_step_\d+")
SNAPSHOT = re.compile(r"snapshot_\d+")
_SNAPSHOT_WRITING = re.compile(r"tmp_snapshot_\d+")
_NAMED_AS_POINT = re.compile(r"(?:(?:tmp|old)_)?step_\d+|bootstrap|(?:tmp_)?snapshot_\d+")


@dataclass(slots=True)
class Layout:
    """The committed recovery points under a checkpoint directory, and the directories being written."""

    points: list[Path] = field(default_factory=list)
    writing: list[Path] = field(default_factory=list)


def recovery_files(glob: str) -> tuple[Path, ...]:
    """The `rollout_recovery.pt` path of every recovery point NeMo's restore may start from under the
    glob's base directory (NeMo's checkpoint_dir), whether or not the file exists: NeMo's layout, not the
    rest of the glob, says where they are (a `**` walk would list every weight shard, twice a sweep).
    CheckpointInProgress while one is being written; raises UnreadablePath (or ValueError for a bad glob,
    InventoryError where NeMo's restore would refuse) when a directory cannot be listed."""
    layout = scan(Path(Pattern.parse(glob).base))
    if layout.writing:
        raise CheckpointInProgress(glob, [str(path) for path in layout.writing], _mtimes(layout.writing))
    return tuple(sorted(point / INVENTORY for point in layout.points))


def scan(root: Path) -> Layout:
    """Every `step_N` is a point (NeMo restores the newest; with another restore mode, or once a newer
    one is removed, any), with the snapshots NeMo would accept under it (selection.py). Bootstrap
    snapshots count only while no `step_N` exists: NeMo's restore reads them only then."""
    layout = Layout()
    names = _directories(root, required=True)
    steps = [name for name in names if _STEP.fullmatch(name)]
    for name in names:
        if _STEP_WRITING.fullmatch(name):
            layout.writing.append(root / name)
        elif _STEP.fullmatch(name):
            layout.points.append(root / name)
            _scan_snapshots(root / name, selection.step_anchor(root / name), layout)
        elif name == BOOTSTRAP:  # a save into it blocks still: TQ's save must not see a clear
            _scan_snapshots(root / name, None if steps else selection.bootstrap_anchor(root / name), layout)
    return layout


def _scan_snapshots(directory: Path, anchor: selection.Anchor | None, layout: Layout) -> None:
    """The snapshots being written, and (unless `anchor` is None) those NeMo's restore would accept."""
    root = directory / SNAPSHOTS
    committed: list[Path] = []
    for name in _directories(root, required=False):
        if _SNAPSHOT_WRITING.fullmatch(name):
            layout.writing.append(root / name)
        elif SNAPSHOT.fullmatch(name):
            committed.append(root / name)
    if anchor is not None:
        layout.points.extend(selection.restorable(directory, committed, anchor))


def _mtimes(paths: list[Path]) -> dict[str, float]:
    """Each directory's last modification (seconds since the epoch), for how long it has blocked."""
    found: dict[str, float] = {}
    for path in paths:
        try:
            found[str(path)] = path.stat().st_mtime
        except OSError:
            continue  # renamed or removed since the listing
    return found


def _directories(path: Path, *, required: bool) -> list[str]:
    """The names of the directories in `path` that may be recovery points or saves, sorted. A missing
    `path` holds none (it was pruned, or has no snapshots), unless `required`: the checkpoint directory
    itself missing is a volume not mounted, never an empty job. An entry named as a point that is a link
    to nothing, or cannot be looked at, raises UnreadablePath: the checkpoint it stands for is on a volume
    that is not there, and its rows are unknown (NeMo's own restore lists it too, and fails on it)."""
    try:
        with os.scandir(path) as entries:
            found = sorted(entries, key=lambda entry: entry.name)
    except FileNotFoundError as exc:
        if required:
            raise UnreadablePath(
                str(path), "the checkpoint directory does not exist: is the checkpoint volume mounted?"
            ) from exc
        return []
    except NotADirectoryError:
        return []
    except OSError as exc:
        raise UnreadablePath(str(path), unreadable(exc)) from exc
    return [entry.name for entry in found if _is_directory(entry)]


def _is_directory(entry: os.DirEntry[str]) -> bool:
    if not _NAMED_AS_POINT.fullmatch(entry.name):
        return entry.is_dir()
    try:
        is_directory = stat.S_ISDIR(os.stat(entry.path).st_mode)
    except FileNotFoundError as exc:
        if entry.is_symlink():
            raise UnreadablePath(
                entry.path, f"is a dangling symlink (to {_link_target(entry.path)}): is its volume mounted?"
            ) from exc
        return False  # removed since the listing: pruned
    except OSError as exc:
        raise UnreadablePath(entry.path, unreadable(exc)) from exc
    if not is_directory and _STEP.fullmatch(entry.name):
        # NeMo lists every `step_N` entry, directory or not (CheckpointManager.get_latest_checkpoint_path,
        # nemo_rl/utils/checkpoint.py lines 552-569 at 9355cc54), and its restore stops on one that is not
        # a directory (its training info cannot be opened)
        raise UnreadablePath(entry.path, "is not a directory: NeMo RL's restore stops on it")
    return is_directory


def _link_target(path: str) -> str:
    try:
        return repr(os.readlink(path))
    except OSError:
        return "an unreadable target"
