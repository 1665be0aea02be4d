"""The verl soak (`scripts/soak-verl --minutes N`): verl 0.9.1's own ReplayBuffer and padding, in verl's fit
order, beside the tq-gc sidecar running deploy/examples/verl.yaml, with steps longer than the grace.

It starts its own Ray head and, as the training job, a real TransferQueue and the sidecar (state memory://,
the example's config with a short grace and interval). The trainer is docs/integrations.md's ("verl"):
TqGcTrainerMixin first, TQGC_CONFIG naming the sidecar's config. For N minutes it runs steps (each longer
than the grace, verl's replay buffer polling kv_list while the rollouts finish), validations (as long), a
TQ checkpoint every other step saved before the step's clear, and after each checkpoint a resume: the
trainer stops, verl's `tq.load_checkpoint` restores the trained batch nothing will clear, and a new trainer
goes on.

While the trainer holds a batch (sampling to the step's clear) it checks every quarter second that every
row of it is still there. After each resume it checks, once grace + two intervals + one sweep's duration
have passed, how many of the restored batch's rows are left. One line says both counts (must be 0); exit 0
only if both are 0 and some restored rows were reclaimed, 1 otherwise, 2 if the soak itself broke.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.testbed.ray_head import RAY_TEST_ENV, TQ_TEST_CONF, RayHead
from tools.testbed.verl_job import VerlShapedTrainer
from tq_gc import load_config, start_sidecar
from tq_gc.integrations.verl import CONFIG_ENV, TqGcTrainerMixin

log = logging.getLogger("soak-verl")

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verl.yaml"
GRACE_S = 4.0
INTERVAL_S = 1.0
STEP_S = GRACE_S + 2.0  # every step and validation outlasts the grace
SWEEP_S = 1.0  # a sweep's own duration, at most, on a busy 2-core machine
CHECK_S = 0.25
ROLLOUT_DELAY_S = 0.5  # the replay buffer polls kv_list meanwhile


class SoakTrainer(TqGcTrainerMixin, VerlShapedTrainer):
    """The trainer lines of docs/integrations.md (its config from TQGC_CONFIG)."""


@dataclass
class Leak:
    keys: set[str]
    deadline: float  # monotonic
    left: int | None = None


@dataclass
class Watch:
    """What the soak saw: rows gone while held, and each resume's restored batch."""

    tq: Any
    train: str
    held_missing: set[str] = field(default_factory=set)
    leaks: list[Leak] = field(default_factory=list)
    steps: int = 0
    validations: int = 0
    resumes: int = 0

    def keys(self, partition: str) -> set[str]:
        return set(self.tq.kv_list(partition).get(partition, {}))

    def held(self, batch: Any) -> None:
        missing = set(batch.keys) - self.keys(batch.partition_id)
        if missing - self.held_missing:
            log.error("rows of a batch in the trainer's hands are gone: %s", sorted(missing)[:5])
        self.held_missing |= missing

    def leaks_due(self) -> None:
        now = time.monotonic()
        present = None
        for leak in self.leaks:
            if leak.left is None and now >= leak.deadline:
                present = self.keys(self.train) if present is None else present
                leak.left = len(leak.keys & present)

    def hold_for(self, seconds: float, batch: Any) -> None:
        """The step's work: the batch is read and written for `seconds`, checked all along."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.held(batch)
            self.leaks_due()
            time.sleep(CHECK_S)
        self.held(batch)

    def line(self) -> str:
        left = sum(leak.left or 0 for leak in self.leaks)
        restored = sum(len(leak.keys) for leak in self.leaks)
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"verl soak {verdict}: deleted while in the trainer's hands: {len(self.held_missing)}; "
            f"leaked rows left past grace + two intervals: {left} (of {restored} restored by "
            f"{self.resumes} resumes); {self.steps} steps, {self.validations} validations, "
            f"grace {GRACE_S:g} s, steps {STEP_S:g} s"
        )

    @property
    def passed(self) -> bool:
        checked = [leak for leak in self.leaks if leak.left is not None]
        return (
            not self.held_missing
            and bool(checked)
            and all(leak.left == 0 for leak in checked)
            and sum(len(leak.keys) for leak in checked) > 0
        )


def write_config(workdir: Path, ray_address: str) -> Path:
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    values.update(
        namespace=f"soak-verl-{uuid.uuid4().hex[:6]}",
        transfer_queue={"ray_address": ray_address},
        grace_seconds=GRACE_S,
        allow_short_grace=True,
        schedule={"interval_seconds": INTERVAL_S},
    )
    path = workdir / "verl.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def run(minutes: float, workdir: Path) -> Watch:
    import ray

    with contextlib.ExitStack() as stack:
        os.environ.update(RAY_TEST_ENV)
        os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")
        head = RayHead(num_cpus=4).start()
        stack.callback(head.stop)
        ray.init(address=head.address, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        stack.callback(ray.shutdown)
        import transfer_queue as tq

        tq.init(TQ_TEST_CONF)
        config_path = write_config(workdir, head.address)
        sidecar = start_sidecar(load_config(config_path))
        stack.callback(lambda: ray.kill(sidecar, no_restart=True))
        os.environ[CONFIG_ENV] = str(config_path)
        log.info("Ray, TQ and the sidecar up; %s", config_path)
        return train(tq, minutes, workdir)
    raise AssertionError("unreachable")


def train(tq: Any, minutes: float, workdir: Path) -> Watch:
    watch = Watch(tq, "train")
    trainer = SoakTrainer(tq, "train", "val", workdir / "ckpt")
    trainer.validate(lambda _trainer, batch: watch.hold_for(STEP_S, batch))  # val_before_train
    end = time.monotonic() + minutes * 60
    while time.monotonic() < end:
        save = watch.steps % 2 == 1
        validate = watch.steps % 3 == 2
        batch = trainer.step(
            lambda _trainer, batch: watch.hold_for(STEP_S, batch),
            save=save,
            validate=(lambda _trainer, batch: watch.hold_for(STEP_S, batch)) if validate else None,
            rollout_delay_s=ROLLOUT_DELAY_S,
        )
        watch.steps += 1
        watch.validations += validate
        if save:
            trainer = resume(tq, trainer, batch, watch, workdir)
        watch.leaks_due()
    while any(leak.left is None for leak in watch.leaks):  # the trainer still runs: sweeps go on
        time.sleep(CHECK_S)
        watch.leaks_due()
    trainer.on_train_end()
    return watch


def resume(tq: Any, trainer: VerlShapedTrainer, batch: Any, watch: Watch, workdir: Path) -> SoakTrainer:
    """The job stops after the step that saved a checkpoint and resumes from it."""
    step = trainer.global_steps - 1
    resumed = SoakTrainer(tq, "train", "val", workdir / "ckpt")  # its presence before the old one goes
    trainer.on_train_end()
    tq.load_checkpoint(str(workdir / "ckpt" / f"global_step_{step}" / "transfer_queue"))
    restored = set(batch.keys) & watch.keys("train")
    watch.leaks.append(Leak(restored, time.monotonic() + GRACE_S + 2 * INTERVAL_S + SWEEP_S))
    watch.resumes += 1
    resumed.global_steps = step + 1
    log.info("resumed from step %d: %d rows of its trained batch restored", step, len(restored))
    return resumed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/soak-verl", description=__doc__)
    parser.add_argument("--minutes", type=float, required=True, help="how long the training runs")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (config, checkpoints)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    workdir = Path(tempfile.mkdtemp(prefix="tqgc-soak-verl-"))
    try:
        watch = run(args.minutes, workdir)
    except Exception as exc:  # the soak could not run: no verdict
        log.exception("the soak itself failed")
        print(f"verl soak: broken, no verdict: {type(exc).__name__}: {exc}".splitlines()[0])
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(watch.line(), flush=True)
    return 0 if watch.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
