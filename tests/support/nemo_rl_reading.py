"""What the NeMo RL reader tests share: the rows tq-gc's reader keeps for the recovery files under a
checkpoint directory, and staging row ids."""

from __future__ import annotations

from pathlib import Path

from tq_gc.config import ManifestSource
from tq_gc.references.manifests import ManifestsSource
from tq_gc.rows import RowId, rows_of

from support.nemo_rl_data_plane import STAGING


def read(ckpt: Path) -> set[RowId]:
    """The rows the reader says the recovery files under `ckpt` keep."""
    source = ManifestSource(glob=f"{ckpt}/**/rollout_recovery.pt", format="nemo_rl_recovery")
    return rows_of(ManifestsSource([source]).read())


def staging(*keys: str) -> set[RowId]:
    return {RowId(STAGING, key) for key in keys}
