"""verl (`verl/trainer/ppo/v1`, 0.9.x): the rows in the trainer's hands stay admitted until the step's clear.

    from verl.trainer.ppo.v1 import trainer_base
    from tq_gc.integrations.verl import wrap_registered_trainers
    wrap_registered_trainers(trainer_base.TRAINER_REGISTRY)  # TqGcTrainerMixin before each verl trainer

with env TQGC_CONFIG naming the file the sidecar runs with (docs/integrations.md, "verl").

verl's lifecycle, and what the mixin does at each point (verl 0.9.1's code):
- `ReplayBuffer.sample()` -> `_materialize_batch()` clears the sampled groups' prompt rows, the owner
  reference of their trajectories, and hands the trajectories to the step. The mixin admits those
  trajectories inside `_materialize_batch`, before the clear: make-before-break, no hand-off gap.
- `_balance_batch()` writes padding rows (`pad<hex>_<i>_0`, tag is_padding) that never have a prompt row.
  They are admitted as soon as it returns; until then (milliseconds) they are new rows inside their grace.
- The step reads and writes the batch, saves its checkpoint (with the batch in it), runs on_step_end and
  maybe validation, then clears the batch with no hook after the clear. The step's admissions are released
  at the next on_step_begin (or on_train_end), when the rows are gone; released late, never early.
- Validation samples `val` the same way and clears each batch before on_validate_end, which releases them.
- A presence admission `verl/<run>/trainer` (no rows) lives as long as the trainer: with the shipped
  config's `admissions.expect_nonempty`, sweeps abort while no trainer runs this integration.
A trainer that dies stops renewing: its admissions lapse after their TTL and what it held is reclaimed
like any leak. The batch restored by each resume (saved before the step's clear) is held by nothing and
is reclaimed after grace.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence
from contextlib import ExitStack
from typing import Any

from tq_gc.config import Config, load_config
from tq_gc.errors import ConfigError, TqGcError
from tq_gc.publish.client import GcClient
from tq_gc.publish.holders import public_name
from tq_gc.state.base import StateStore

log = logging.getLogger(__name__)

ADMISSION_PREFIX = "verl/"
PRESENCE = "trainer"
CONFIG_ENV = "TQGC_CONFIG"
STEP = "step"
VALIDATE = "validate"


def presence_admission(admission_id: str) -> bool:
    """Whether `admission_id` is a verl trainer integration's presence admission."""
    name = public_name(admission_id)  # as the state store has it: with its holder
    return name.startswith(ADMISSION_PREFIX) and name.endswith(f"/{PRESENCE}")


def protection(config: Config, state: StateStore) -> str:
    """`tq-gc check`'s line: whether a verl trainer integration holds what its trainer uses (an owner rule
    alone loses a sampled batch's owner for its whole step). Raises TqGcError when not fail-safe."""
    live = state.live_admissions()
    present = sorted(admission_id for admission_id in live if presence_admission(admission_id))
    if present:
        held = sum(
            len(keys)
            for admission_id, rows in live.items()
            if admission_id.startswith(ADMISSION_PREFIX)
            for keys in rows.values()
        )
        return f"active: trainer integration live ({', '.join(present)}), {held} rows of its batches held"
    if config.admissions.expect_nonempty:
        return "INACTIVE: no verl trainer integration is live; sweeps abort until a trainer runs it"
    raise TqGcError(
        "INACTIVE and NOT fail-safe: no verl trainer integration is live, and a batch in use has no "
        "prompt row: it would be deleted after grace. Set admissions.expect_nonempty: true "
        "(deploy/examples/verl.yaml does) or run the trainer with tq_gc.integrations.verl"
    )


def client_for(config: Config) -> GcClient:
    """A GcClient on the registry the collector of `config` reads: the sidecar's, or the shared store."""
    if config.state_url.startswith("memory:"):
        from tq_gc.sidecar.client import sidecar_registry  # imports Ray: only for the sidecar's registry

        return GcClient(sidecar_registry(config.sidecar.name, config.sidecar.ray_namespace))
    return GcClient.connect(config.state_url, config.namespace)


class BatchHolder:
    """The admissions of the batches a verl trainer holds, by phase (a step's or a validation's)."""

    def __init__(self, client: GcClient, run_id: str | None = None) -> None:
        self._client = client
        self._prefix = f"{ADMISSION_PREFIX}{run_id or uuid.uuid4().hex[:12]}/"
        self._phases: dict[str, ExitStack] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._presence = ExitStack()
        self._presence.enter_context(client.holding(self._prefix + PRESENCE, {}))
        self.phase = STEP

    @property
    def prefix(self) -> str:
        return self._prefix

    def hold(self, partition: str, keys: Collection[str]) -> None:
        """Admit `keys` of `partition` until the current phase is released (durable on return)."""
        if not keys:
            return
        with self._lock:
            self._count += 1
            admission_id = f"{self._prefix}{self.phase}/{self._count}"
            stack = self._phases.setdefault(self.phase, ExitStack())
        stack.enter_context(self._client.holding(admission_id, {partition: sorted(keys)}))

    def release(self, phase: str) -> None:
        """Release every admission made in `phase` (its rows are cleared by then)."""
        with self._lock:
            stack = self._phases.pop(phase, None)
        if stack is not None:
            stack.close()

    def close(self) -> None:
        """Release everything, the presence admission last, and close the client."""
        for phase in list(self._phases):
            self.release(phase)
        self._presence.close()
        self._client.close()


def hold_sampled_batches(replay_buffer: Any, holder: BatchHolder) -> Any:
    """Make `replay_buffer` (verl's ReplayBuffer or a subclass) admit each batch it materializes before
    it clears the batch's prompt rows. Returns the same replay buffer."""
    materialize = getattr(replay_buffer, "_materialize_batch", None)
    if materialize is None:
        raise TypeError(
            f"{type(replay_buffer).__name__} has no _materialize_batch: tq-gc's verl integration follows "
            "verl 0.9's ReplayBuffer (verl/trainer/ppo/v1/replay_buffer.py); a sampler of another shape "
            "must admit its batches itself (tq_gc.integrations.verl.BatchHolder.hold)"
        )

    def admitted_then_materialized(
        partition_id: str, selected_prompt_uids: Sequence[str], partition_snapshot: Mapping[str, Any]
    ) -> Any:
        holder.hold(partition_id, batch_keys(selected_prompt_uids, partition_snapshot))
        return materialize(partition_id, selected_prompt_uids, partition_snapshot)

    replay_buffer._materialize_batch = admitted_then_materialized
    return replay_buffer


def batch_keys(prompt_uids: Collection[str], rows: Collection[str]) -> list[str]:
    """The trajectory keys of the groups `prompt_uids` among `rows`: verl's `key.split("_")[0]` is the
    group's uid."""
    selected = set(prompt_uids)
    return [key for key in rows if key.split("_")[0] in selected]


class TqGcTrainerMixin:
    """Put first in the bases of a verl PPOTrainer subclass. Overrides only what it wraps; each override
    calls verl's own method."""

    tq_gc_config: str | None = None
    _tq_gc_holder: BatchHolder | None = None

    def tq_gc_client(self) -> GcClient:
        """The client admissions go through; override to build your own."""
        path = self.tq_gc_config or os.environ.get(CONFIG_ENV)
        if not path:
            raise ConfigError(
                f"tq-gc's verl integration needs the sidecar's config: set {CONFIG_ENV}=verl.yaml or the "
                "trainer class's tq_gc_config, or override tq_gc_client()"
            )
        return client_for(load_config(path))

    def _tq_gc(self) -> BatchHolder:
        if self._tq_gc_holder is None:
            self._tq_gc_holder = BatchHolder(self.tq_gc_client())
            log.info("tq-gc: holding verl batches as admissions %s*", self._tq_gc_holder.prefix)
        return self._tq_gc_holder

    def _build_replay_buffer(self) -> Any:
        return hold_sampled_batches(_verl(self, "_build_replay_buffer")(), self._tq_gc())

    def _balance_batch(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        balanced = _verl(self, "_balance_batch")(batch, *args, **kwargs)
        padding = set(balanced.keys) - set(batch.keys)
        self._tq_gc().hold(balanced.partition_id, padding)
        return balanced

    def on_step_begin(self) -> None:
        self._tq_gc().release(STEP)  # the last step's batch: cleared at the end of its iteration
        _verl(self, "on_step_begin")()

    def on_validate_begin(self) -> None:
        self._tq_gc().phase = VALIDATE
        _verl(self, "on_validate_begin")()

    def on_validate_end(self) -> None:
        holder = self._tq_gc()
        holder.phase = STEP
        holder.release(VALIDATE)
        _verl(self, "on_validate_end")()

    def on_train_end(self) -> None:
        _verl(self, "on_train_end")()
        if self._tq_gc_holder is not None:
            self._tq_gc_holder.close()
            self._tq_gc_holder = None


def wrap_registered_trainers(registry: MutableMapping[str, type]) -> None:
    """Put the mixin in front of every trainer in verl's `TRAINER_REGISTRY` (mode -> class), in place:
    verl's TaskRunner builds `get_trainer_cls(trainer.v1.trainer_mode)`. Idempotent."""
    for mode, trainer_cls in list(registry.items()):
        if not issubclass(trainer_cls, TqGcTrainerMixin):
            registry[mode] = type(trainer_cls.__name__, (TqGcTrainerMixin, trainer_cls), {})


def _verl(trainer: TqGcTrainerMixin, name: str) -> Callable[..., Any]:
    """verl's own `name` on `trainer`: the next class after the mixin in the MRO."""
    method: Callable[..., Any] = getattr(super(TqGcTrainerMixin, trainer), name)
    return method


__all__ = [
    "ADMISSION_PREFIX",
    "BatchHolder",
    "TqGcTrainerMixin",
    "batch_keys",
    "client_for",
    "hold_sampled_batches",
    "presence_admission",
    "protection",
    "wrap_registered_trainers",
]
