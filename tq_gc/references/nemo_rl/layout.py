"""Where NeMo RL keeps what a restore may start from, under its `checkpointing.checkpoint_dir`.

    step_N/                                     a trainer checkpoint (CheckpointManager)
    tmp_step_N/, old_step_N/                    a save in progress, a step being replaced
    step_N/rollout_snapshots/snapshot_NNNNNN/   a periodic rollout snapshot of step_N's lineage
    step_N/rollout_snapshots/tmp_snapshot_NNNNNN/    being written (renamed to snapshot_ when done)
    step_N/rollout_snapshots/trash_snapshot_NNNNNN/  pruned (renamed, then removed): not read
    bootstrap/rollout_snapshots/...             the same, before the first trainer checkpoint

Each committed directory is a recovery point: NeMo's restore starts from the newest, but any may become
the newest one again (a newer one is pruned, corrupt, or another restore mode is chosen), so each one's
rows are kept until it is pruned. A `tmp_`/`old_` directory means a save is writing rows' references
that cannot be read yet: the sweep skips (it also covers NeMo's own TQ save, which must not see a clear:
see the package docstring).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tq_gc.errors import CheckpointInProgress
from tq_gc.formats.globs import Pattern
from tq_gc.formats.manifest_formats import NEMO_RL_INVENTORY
from tq_gc.references.globwalk import UnreadablePath, unreadable

INVENTORY = NEMO_RL_INVENTORY  # the file naming a recovery point, as the config checks a glob for it
SNAPSHOTS = "rollout_snapshots"
BOOTSTRAP = "bootstrap"
_STEP = re.compile(r"step_\d+")
_STEP_WRITING = re.compile(r"(?:tmp|old)_step_\d+")
SNAPSHOT = re.compile(r"snapshot_\d+")
_SNAPSHOT_WRITING = re.compile(r"tmp_snapshot_\d+")


@dataclass(slots=True)
class Layout:
    """The committed recovery points under a checkpoint directory, and the directories being written."""

    points: list[Path] = field(default_factory=list)
    writing: list[Path] = field(default_factory=list)


def recovery_files(glob: str) -> tuple[Path, ...]:
    """The `rollout_recovery.pt` path of every committed recovery point under the glob's base directory
    (NeMo's checkpoint_dir), whether or not the file exists: NeMo's layout, not the rest of the glob,
    says where they are (a `**` walk would list every weight shard, twice a sweep). CheckpointInProgress
    while one is being written; raises UnreadablePath (or ValueError for a bad glob) when a directory
    cannot be listed."""
    layout = scan(Path(Pattern.parse(glob).base))
    if layout.writing:
        raise CheckpointInProgress(glob, [str(path) for path in layout.writing])
    return tuple(sorted(point / INVENTORY for point in layout.points))


def scan(root: Path) -> Layout:
    layout = Layout()
    for name in _directories(root, required=True):
        if _STEP_WRITING.fullmatch(name):
            layout.writing.append(root / name)
        elif _STEP.fullmatch(name):
            layout.points.append(root / name)
            _scan_snapshots(root / name, layout)
        elif name == BOOTSTRAP:
            _scan_snapshots(root / name, layout)
    return layout


def _scan_snapshots(anchor: Path, layout: Layout) -> None:
    root = anchor / SNAPSHOTS
    for name in _directories(root, required=False):
        if _SNAPSHOT_WRITING.fullmatch(name):
            layout.writing.append(root / name)
        elif SNAPSHOT.fullmatch(name):
            layout.points.append(root / name)


def _directories(path: Path, *, required: bool) -> list[str]:
    """The names of the directories in `path`, sorted. A missing `path` holds none (it was pruned, or
    has no snapshots), unless `required`: the checkpoint directory itself missing is a volume not
    mounted, never an empty job."""
    try:
        with os.scandir(path) as entries:
            return sorted(entry.name for entry in entries if entry.is_dir())
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
