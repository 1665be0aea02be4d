"""verl 0.9.1's own ReplayBuffer and padding on a real TransferQueue, driven in the order of verl's fit loop.

verl's trainer package (`verl/trainer/ppo/v1/__init__.py`) imports the whole trainer, whose dependencies
(datasets, torchdata, codetiming, Pillow, ...) the test environment does not install; `replay_buffer.py`
itself needs only TQ, numpy, omegaconf and `verl.utils.skip`. So the module is
loaded from its file, under its own name, without the package's `__init__` (the `verl` extra installs verl
with --no-deps). Padding comes from verl's own `verl.trainer.ppo.padding_utils`, which imports normally.

`VerlShapedTrainer` runs verl's `PPOTrainer.fit` order (tests/unit/test_verl_trainer_code.py checks it
against `trainer_base.py`): on_step_begin, prepare_step, on_sample_begin, replay_buffer.sample,
on_sample_end, _balance_batch (padding), the step's work, _save_checkpoint (tq.save_checkpoint), on_step_end,
validation (on_validate_begin, sample `val`, clear, on_validate_end), then the step's clear. The agent loop's
writes are verl's: prompt rows (tag-only) from the trainer, then `status: running`, the trajectories
`{uid}_{session}_{i}` and `status: finished` (or `failure`) as `kv_put`s of the prompt key.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

VERL_V1 = ("verl", "trainer", "ppo", "v1")
EOS_TOKEN_ID = 2
# The longest a rollout waits for its condition (run_later): generous, for a starved machine.
ROLLOUT_WAIT_S = 120.0


def verl_source(*parts: str) -> Path:
    """The path of a file of the installed verl package."""
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.origin is not None, "verl is not installed: scripts/install.sh --dev"
    return Path(spec.origin).parent.joinpath(*parts)


def replay_buffer_module() -> ModuleType:
    """verl's `verl/trainer/ppo/v1/replay_buffer.py`, loaded from its file (once per process)."""
    name = "verl.trainer.ppo.v1.replay_buffer"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, verl_source(*VERL_V1[1:], "replay_buffer.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def replay_buffer(poll_interval_s: float = 0.2) -> Any:
    """verl's async ReplayBuffer (the modes that save a TQ checkpoint), as its trainer builds it."""
    from omegaconf import DictConfig

    module = replay_buffer_module()
    return module.ReplayBufferAsync(
        trainer_mode="colocate_async",
        trainer_config=DictConfig({}),
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs=DictConfig({}),
        poll_interval=poll_interval_s,
    )


@dataclass
class AgentLoop:
    """What verl's trainer and agent loop write for a group, with TQ's own calls."""

    tq: Any
    sessions: int = 2

    def submit(self, partition: str, prompts: int, global_steps: int) -> list[str]:
        """The trainer's prompt rows: tag-only (sync mode and `val`), uid = str(uuid4())."""
        uids = [str(uuid.uuid4()) for _ in range(prompts)]
        tags = [{"is_prompt": True, "status": "pending", "global_steps": global_steps} for _ in uids]
        self.tq.kv_batch_put(keys=uids, partition_id=partition, tags=tags)
        return uids

    def run(self, partition: str, uid: str, global_steps: int, status: str = "finished") -> list[str]:
        """One group's rollout: status running, each session's trajectory, then the terminal status."""
        import torch
        from tensordict import TensorDict

        self.tq.kv_put(key=uid, partition_id=partition, tag={"status": "running"})
        keys = [f"{uid}_{session}_0" for session in range(self.sessions)]
        fields = TensorDict(
            {
                "input_ids": torch.ones(len(keys), 4, dtype=torch.int64),
                "prompts": torch.ones(len(keys), 2, dtype=torch.int64),
                "responses": torch.ones(len(keys), 2, dtype=torch.int64),
            },
            batch_size=len(keys),
        )
        tag = {
            "status": "success",
            "prompt_len": 2,
            "response_len": 2,
            "seq_len": 4,
            "global_steps": global_steps,
            "min_global_steps": global_steps,
            "max_global_steps": global_steps,
        }
        self.tq.kv_batch_put(keys=keys, partition_id=partition, fields=fields, tags=[dict(tag) for _ in keys])
        self.tq.kv_put(key=uid, partition_id=partition, tag={"status": status})
        return keys

    def run_later(
        self,
        partition: str,
        uids: Sequence[str],
        global_steps: int,
        delay_s: float,
        until: Callable[[], bool] | None = None,
    ) -> threading.Thread:
        """The groups' rollouts in a thread after `delay_s`, and once `until()` holds (checked every 50 ms,
        for ROLLOUT_WAIT_S at most): the replay buffer polls kv_list meanwhile."""

        def rollouts() -> None:
            time.sleep(delay_s)
            deadline = time.monotonic() + ROLLOUT_WAIT_S
            while until is not None and not until() and time.monotonic() < deadline:
                time.sleep(0.05)
            for uid in uids:
                self.run(partition, uid, global_steps)

        thread = threading.Thread(target=rollouts, name="verl-agent-loop", daemon=True)
        thread.start()
        return thread


StepWork = Callable[["VerlShapedTrainer", Any], None]


@dataclass
class VerlShapedTrainer:
    """verl's PPOTrainer.fit order over verl's own ReplayBuffer and padding; hooks do nothing here."""

    tq: Any
    train: str
    val: str
    ckpt_dir: Path
    batch_size: int = 3  # prompts a step samples
    batch_multiple: int = 4  # the data-parallel multiple padding rounds the batch up to
    agent_loop: AgentLoop = field(init=False)
    global_steps: int = 1
    replay_buffer: Any = field(init=False)
    sampled: list[Any] = field(default_factory=list)  # every batch, as sample() returned it

    def __post_init__(self) -> None:
        self.agent_loop = AgentLoop(self.tq)
        self.replay_buffer = self._build_replay_buffer()

    # verl's methods the integration wraps, each doing what verl's does to TQ
    def _build_replay_buffer(self) -> Any:
        return replay_buffer()

    def _balance_batch(self, batch: Any, metrics: dict[str, Any] | None = None) -> Any:
        from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

        return upsample_batch_to_divisible_size(batch, self.batch_multiple, EOS_TOKEN_ID)

    def _save_checkpoint(self) -> Path:
        path = self.ckpt_dir / f"global_step_{self.global_steps}" / "transfer_queue"
        self.tq.save_checkpoint(str(path), metadata={"global_steps": self.global_steps})
        return path

    def on_step_begin(self) -> None:
        return

    def on_sample_begin(self) -> None:
        return

    def on_sample_end(self) -> None:
        return

    def on_step_end(self) -> None:
        return

    def on_validate_begin(self) -> None:
        return

    def on_validate_end(self) -> None:
        return

    def on_train_end(self) -> None:
        return

    # verl's fit loop: validation before training (val_before_train, on by default), then steps
    def validate(self, work: StepWork | None = None) -> None:
        self.on_validate_begin()
        self._validate(work or (lambda _trainer, _batch: None))
        self.on_validate_end()

    def prepare_step(
        self, rollout_delay_s: float = 0.0, rollout_until: Callable[[], bool] | None = None
    ) -> list[str]:
        uids = self.agent_loop.submit(self.train, self.batch_size, self.global_steps)
        if rollout_delay_s or rollout_until is not None:
            self.agent_loop.run_later(self.train, uids, self.global_steps, rollout_delay_s, rollout_until)
        else:
            for uid in uids:
                self.agent_loop.run(self.train, uid, self.global_steps)
        return uids

    def step(
        self,
        work: StepWork | None = None,
        save: bool = False,
        validate: StepWork | None = None,
        rollout_delay_s: float = 0.0,
        rollout_until: Callable[[], bool] | None = None,
    ) -> Any:
        """One iteration of verl's fit loop; `work` runs where verl computes and updates, `validate`
        where validation holds its `val` batch; the rollouts finish after `rollout_delay_s`, and once
        `rollout_until()` holds. Returns the step's batch (cleared by then)."""
        self.on_step_begin()
        self.prepare_step(rollout_delay_s, rollout_until)
        self.on_sample_begin()
        batch, _metrics = self.replay_buffer.sample(
            global_steps=self.global_steps, partition_id=self.train, batch_size=self.batch_size
        )
        self.on_sample_end()
        self.sampled.append(batch)
        batch = self._balance_batch(batch)
        if work is not None:
            work(self, batch)
        if save:
            self._save_checkpoint()
        self.on_step_end()
        if validate is not None:
            self.validate(validate)
        self.tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)  # "7. cleanup transfer queue"
        self.global_steps += 1
        return batch

    def _validate(self, work: StepWork) -> None:
        uids = self.agent_loop.submit(self.val, 2, self.global_steps)
        for uid in uids:
            self.agent_loop.run(self.val, uid, self.global_steps)
        batch, _ = self.replay_buffer.sample(
            global_steps=self.global_steps, partition_id=self.val, batch_size=2
        )
        work(self, batch)
        self.tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)


def padding_keys(batch: Any) -> list[str]:
    return [key for key, tag in zip(batch.keys, batch.tags, strict=True) if tag.get("is_padding")]
