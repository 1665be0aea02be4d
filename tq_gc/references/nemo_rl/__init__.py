"""NeMo RL's recovery points read as references: the rows its own restore would keep, from the same files.

NeMo RL (GitHub NVIDIA-NeMo/RL; its single-controller async GRPO with the TQ data plane) writes, under
`checkpointing.checkpoint_dir`, trainer checkpoints and periodic rollout snapshots (layout.py), each a
recovery point whose files (point.py) name the staging rows a restore from it keeps: the recovery
ledger (ledger.py; one reader per schema version, schema2.py, schema3.py, schema4.py), the replay index
(replay.py) and a snapshot's NeMo Gym state (gym.py). Files are read without running any of their code
(torchfile.py) and with a bound on the keys they may name (budget.py).

Consistency with NeMo's own TQ saves, which no trainer script can fence (they run inside its
SingleController actor, one on a timer): NeMo writes every save into a `tmp_` directory it renames when
done, and TQ's save of the rows runs inside it. While one is there, the sweep skips, so it clears no row
during a save. The reference sources are read twice a sweep (before and after the listing), so a save
that starts later than the second read overlaps only the sweep's deletes: those are rows no committed
point keeps and older than the grace, which a save needs only if it references a row sealed since the
last committed point and more than `grace_seconds` ago. Hence the rule docs/integrations.md and the
example config state: grace above the longest interval between two of NeMo's saves.
"""

from __future__ import annotations

from tq_gc.references.nemo_rl.errors import InventoryError, SaveInProgress
from tq_gc.references.nemo_rl.layout import INVENTORY, recovery_files
from tq_gc.references.nemo_rl.point import PointFiles, read_point, restore_rows
from tq_gc.references.nemo_rl.torchfile import ALLOWED_GLOBALS

__all__ = [
    "ALLOWED_GLOBALS",
    "INVENTORY",
    "InventoryError",
    "PointFiles",
    "SaveInProgress",
    "read_point",
    "recovery_files",
    "restore_rows",
]
