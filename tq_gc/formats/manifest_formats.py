"""The manifest formats a source may name (a manifests entry's `format:`), and what a source of each needs.

| format           | one file is                        | rows                                            |
|------------------|------------------------------------|-------------------------------------------------|
| native           | a tq-gc/manifest/v1 JSON document  | `rows` {partition: [keys]}, none once `retired` |
| json             | one JSON document                  | keys at `key_path`, in the source's `partition` |
| jsonl            | JSON lines (blank lines ignored)   | keys at `key_path` of each line                 |
| nemo_rl_recovery | a NeMo RL recovery point's files    | what NeMo RL's restore from it keeps            |

Each is one ManifestFormat in FORMATS: the config checks a source's fields with it (config/sources.py),
and references/manifests/ reads the source with the reader registered under the same name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

FormatName = Literal["native", "json", "jsonl", "nemo_rl_recovery"]

# Where NeMo RL's data plane stages rows (the rows its recovery points name), and the file naming a point.
NEMO_RL_STAGING_PARTITION = "rollout_staging"
NEMO_RL_INVENTORY = "rollout_recovery.pt"


class ManifestFormat(ABC):
    """One manifest format, as the config knows it."""

    name: FormatName

    @abstractmethod
    def fitted_partition(self, glob: str, key_path: str | None, partition: str | None) -> str | None:
        """The source's partition (None: its manifests name their own), a default filled in; ValueError
        saying what to change when the source's fields do not fit this format."""


class NativeFormat(ManifestFormat):
    name: FormatName = "native"

    def fitted_partition(self, glob: str, key_path: str | None, partition: str | None) -> str | None:
        if key_path or partition:
            raise ValueError(
                "a native (tq-gc/manifest/v1) manifest names its own partitions: "
                "drop key_path/partition, or set format: json|jsonl"
            )
        return None


class KeyPathFormat(ManifestFormat):
    """JSON whose keys sit at the source's key path, all in the source's partition."""

    def __init__(self, name: FormatName) -> None:
        self.name = name

    def fitted_partition(self, glob: str, key_path: str | None, partition: str | None) -> str | None:
        if not (key_path and partition):
            raise ValueError(f"format {self.name!r} needs both key_path and partition")
        return partition


class NemoRlRecoveryFormat(ManifestFormat):
    """NeMo RL's recovery points: the glob names each one's inventory; the rows are what its restore keeps."""

    name: FormatName = "nemo_rl_recovery"

    def fitted_partition(self, glob: str, key_path: str | None, partition: str | None) -> str | None:
        if key_path:
            raise ValueError(
                "a nemo_rl_recovery source names its rows itself (what NeMo RL's restore keeps): "
                "drop key_path"
            )
        if glob.rsplit("/", 1)[-1] != NEMO_RL_INVENTORY:
            raise ValueError(
                f"a nemo_rl_recovery glob names the {NEMO_RL_INVENTORY} of each recovery point under "
                f"NeMo RL's checkpoint_dir, such as /checkpoints/**/{NEMO_RL_INVENTORY}"
            )
        return NEMO_RL_STAGING_PARTITION if partition is None else partition


FORMATS: dict[str, ManifestFormat] = {
    manifest_format.name: manifest_format
    for manifest_format in (
        NativeFormat(),
        KeyPathFormat("json"),
        KeyPathFormat("jsonl"),
        NemoRlRecoveryFormat(),
    )
}
