"""The nemo_rl_recovery format's reader: NeMo RL's recovery points (the nemo_rl/ package reads them).

Every trainer checkpoint and rollout snapshot under the glob's base directory (NeMo's checkpoint_dir) is
one recovery point, one per `rollout_recovery.pt` path, its manifest all of its files; while a save is
being written (`tmp_step_N`, `old_step_N`, `tmp_snapshot_N`, a ledger without its metadata) the sweep
skips (CheckpointInProgress).
"""

from __future__ import annotations

from pathlib import Path

from tq_gc.config import ManifestSource
from tq_gc.errors import CheckpointInProgress
from tq_gc.formats.manifest_formats import FORMATS
from tq_gc.references import nemo_rl
from tq_gc.references.globwalk import unreadable
from tq_gc.references.manifests.base import FormatReader, SourceSummary
from tq_gc.references.manifests.files import file_error, read_regular_file
from tq_gc.rows import RowId


class NemoRlRecoveryReader(FormatReader[nemo_rl.PointFiles]):
    definition = FORMATS["nemo_rl_recovery"]
    checked_alone = True

    def files(self, source: ManifestSource) -> tuple[Path, ...]:
        return nemo_rl.recovery_files(source.glob)

    def read(self, path: Path, source: ManifestSource) -> nemo_rl.PointFiles:
        try:
            return nemo_rl.read_point(path, lambda file: read_regular_file(file, source.max_file_bytes))
        except OSError as exc:
            raise file_error(Path(exc.filename) if exc.filename else path.parent, unreadable(exc)) from exc

    def rows(self, path: Path, found: nemo_rl.PointFiles, source: ManifestSource) -> list[RowId]:
        assert source.partition is not None, "the config defaults it"
        try:
            return nemo_rl.restore_rows(found, source.partition)
        except nemo_rl.SaveInProgress as exc:
            directory = str(found.directory)
            raise CheckpointInProgress(source.glob, [directory], _mtime(found.directory)) from exc
        except nemo_rl.InventoryError as exc:
            raise file_error(found.directory, str(exc)) from None

    def check_detail(self, source: ManifestSource, summary: SourceSummary) -> str:
        checkpoints = ", ".join(path.parent.name for path in summary.files) or "none yet"
        return (
            f"{len(summary.files)} committed checkpoint(s) ({checkpoints}), "
            f"{summary.rows} rows named in {source.partition}"
        )


def _mtime(directory: Path) -> dict[str, float]:
    try:
        return {str(directory): directory.stat().st_mtime}
    except OSError:
        return {}
