"""verl (`verl/trainer/ppo/v1`, 0.9.x): the rows in the trainer's hands stay admitted until the step's clear.

    from verl.trainer.ppo.v1 import trainer_base
    from tq_gc.integrations.verl import wrap_registered_trainers
    wrap_registered_trainers(trainer_base.TRAINER_REGISTRY)  # TqGcTrainerMixin before each verl trainer

with env TQGC_CONFIG naming the file the sidecar runs with (docs/integrations.md, "verl").

verl's lifecycle, and what the mixin does at each point (verl 0.9.1's code):
- `ReplayBuffer.sample()` -> `_materialize_batch()` clears the sampled groups' prompt rows, the owner
  reference of their trajectories, and hands the trajectories to the step. The mixin admits those
  trajectories inside `_materialize_batch`, before the clear: make-before-break, no hand-off gap. A custom
  sampler (`trainer.v1.sampler.custom_sampler`) that builds its batch another way is named in a warning
  at start, and its batch admitted when `sample()` returns: from the sampler's clear of the prompt rows
  until then the rows are unreferenced, protected by their grace (a sampler that returns more than a
  grace after its clear would lose them).
- `_balance_batch()` writes padding rows (`pad<hex>_<i>_0`, tag is_padding) that never have a prompt row.
  They are admitted as soon as it returns; until then (milliseconds) they are new rows inside their grace.
- `_save_checkpoint()` (`tq.save_checkpoint`, not consistent under concurrent clears) runs inside a
  checkpoint fence `verl/<run>/checkpoint`: no delete batch runs while it saves.
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
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from tq_gc.config import Config, load_config
from tq_gc.errors import ConfigError, TqGcError
from tq_gc.publish.client import GcClient
from tq_gc.publish.holders import public_name
from tq_gc.sidecar.names import SIDECAR_NAME, SIDECAR_RAY_NAMESPACE
from tq_gc.state.base import AdmissionStore
from tq_gc.state.url import is_memory_url

log = logging.getLogger(__name__)

ADMISSION_PREFIX = "verl/"
PRESENCE = "trainer"
CONFIG_ENV = "TQGC_CONFIG"
VERL_REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"
STEP = "step"
CHECKPOINT = "checkpoint"
VALIDATE = "validate"


def presence_admission(admission_id: str) -> bool:
    """Whether `admission_id` is a verl trainer integration's presence admission."""
    name = public_name(admission_id)  # as the state store has it: with its holder
    return name.startswith(ADMISSION_PREFIX) and name.endswith(f"/{PRESENCE}")


def protection(config: Config, state: AdmissionStore) -> str:
    """`tq-gc check`'s line: whether a verl trainer integration holds what its trainer uses (an owner rule
    alone loses a sampled batch's owner for its whole step), in `state` (admissions_swept_by). Raises
    TqGcError when not fail-safe."""
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


def admissions_swept_by(
    config: Config, state: AdmissionStore, opened_here: bool, sidecar_name: str = SIDECAR_NAME
) -> AdmissionStore:
    """The admissions the sweeps of `config` read. With memory:// state they live in the sidecar actor
    (`sidecar_name`: its fixed name, unless a test runs its own), and a state this process opened for
    itself (the CLI's) is empty: read the sidecar's, or raise TqGcError saying that they cannot be read
    from here."""
    if not (opened_here and is_memory_url(config.state_url)):
        return state
    from tq_gc.sidecar.client import sidecar_admissions  # imports Ray: only for the sidecar's state

    try:
        return sidecar_admissions(sidecar_name, SIDECAR_RAY_NAMESPACE, config.transfer_queue.ray_address)
    except TqGcError as exc:
        raise TqGcError(
            f"cannot read the sidecar's state: {exc}. With state_url memory:// the admissions live in the "
            "sidecar actor, and this command's own memory holds none, so whether a verl trainer "
            "integration is live cannot be told from here. Run the check while the sidecar runs, or give "
            "the sidecar and the CLI a shared redis:// state_url"
        ) from exc


def client_for(config: Config) -> GcClient:
    """A GcClient on the registry the collector of `config` reads: the sidecar's, or the shared store."""
    if is_memory_url(config.state_url):
        from tq_gc.sidecar.client import sidecar_registry  # imports Ray: only for the sidecar's registry

        return GcClient(sidecar_registry(SIDECAR_NAME, SIDECAR_RAY_NAMESPACE))
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

    def checkpoint_fence(self) -> AbstractContextManager[str]:
        """No delete while the block runs (a TQ save is not consistent under concurrent clears); it
        starts once no delete batch is in flight."""
        return self._client.checkpoint_fence(self._prefix + CHECKPOINT)

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
    """Make `replay_buffer` (verl's ReplayBuffer, a subclass, or a custom sampler of its shape) admit each
    batch it samples. verl's own `sample()` goes through `_materialize_batch`, which admits the batch
    before it clears the prompt rows (make-before-break). A sampler that builds its batch another way
    (`trainer.v1.sampler.custom_sampler`) is named in a warning here, at start, and its batch is admitted
    when `sample()` returns: from its clear until then the rows are new to the sweeps, within their grace,
    like padding rows. Refuses (TypeError) a sampler without `sample`. Returns the same replay buffer."""
    sample = getattr(replay_buffer, "sample", None)
    if not callable(sample):
        raise TypeError(
            f"{type(replay_buffer).__name__} has no sample(): tq-gc's verl integration follows verl 0.9's "
            "ReplayBuffer (verl/trainer/ppo/v1/replay_buffer.py)"
        )
    materialized = threading.local()  # the keys `_materialize_batch` admitted in this thread's sample()
    materialize = getattr(replay_buffer, "_materialize_batch", None)
    if materialize is not None:

        def admitted_then_materialized(
            partition_id: str, selected_prompt_uids: Sequence[str], partition_snapshot: Mapping[str, Any]
        ) -> Any:
            keys = batch_keys(selected_prompt_uids, partition_snapshot)
            holder.hold(partition_id, keys)
            held_here: set[str] = getattr(materialized, "keys", set())
            held_here.update(keys)
            return materialize(partition_id, selected_prompt_uids, partition_snapshot)

        replay_buffer._materialize_batch = admitted_then_materialized

    def sampled_then_held(*args: Any, **kwargs: Any) -> Any:
        materialized.keys = set()
        sampled = sample(*args, **kwargs)
        batch = sampled[0] if isinstance(sampled, tuple) else sampled  # verl's: (KVBatchMeta, metrics)
        holder.hold(batch.partition_id, set(batch.keys) - materialized.keys)
        return sampled

    replay_buffer.sample = sampled_then_held
    custom = _not_verls(type(replay_buffer), "sample", "_materialize_batch")
    if custom:
        log.warning(
            "tq-gc: the sampler %s has its own %s (not verl's): a batch it builds without "
            "_materialize_batch is admitted when sample() returns, not before its prompt rows are cleared; "
            "until then its rows are protected only by their grace",
            type(replay_buffer).__qualname__,
            " and ".join(custom),
        )
    return replay_buffer


def _not_verls(cls: type, *names: str) -> list[str]:
    """Those of `names` that `cls` takes from outside verl's replay buffer module (or lacks)."""
    custom = []
    for name in names:
        owner = next((klass for klass in cls.__mro__ if name in vars(klass)), None)
        if owner is None or owner.__module__ != VERL_REPLAY_BUFFER:
            custom.append(name)
    return custom


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

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        with self._tq_gc().checkpoint_fence():
            return _verl(self, "_save_checkpoint")(*args, **kwargs)

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
    "admissions_swept_by",
    "batch_keys",
    "client_for",
    "hold_sampled_batches",
    "presence_admission",
    "protection",
    "wrap_registered_trainers",
]
