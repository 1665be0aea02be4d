"""The registration line docs/integrations.md tells a verl user to put in `tq_gc_verl.py`, run as written
against verl 0.9.1's real trainer package (it imports on CPU with the `verl-test` extra): every trainer
verl's TaskRunner can build from `TRAINER_REGISTRY` is then tq-gc's subclass of verl's own trainer."""

from __future__ import annotations

import re
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tq_gc.integrations.verl import TqGcTrainerMixin

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
REGISTRATION_CALL = "wrap_registered_trainers(trainer_base.TRAINER_REGISTRY)"
VERL_MODES = {"sync", "colocate_async", "separate_async"}


def documented_registration() -> str:
    """The python block of docs/integrations.md that holds the registration line."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    [block] = [block for block in blocks if REGISTRATION_CALL in block]
    return textwrap.dedent(block)


@pytest.fixture
def trainer_base() -> Iterator[ModuleType]:
    """verl's real trainer_base, its registry restored afterwards (the line wraps it in place)."""
    with warnings.catch_warnings():
        # verl's own import-time warnings on CPU: its GPU engines (megatron, ...) are absent, and it imports
        # Ray's state API from its old path.
        warnings.filterwarnings("ignore", r".* engine is not available", UserWarning)
        warnings.filterwarnings("ignore", r"Ray state API is no longer experimental", DeprecationWarning)
        from verl.trainer.ppo.v1 import trainer_base as module

    verl_registry = dict(module.TRAINER_REGISTRY)
    yield module
    module.TRAINER_REGISTRY.clear()
    module.TRAINER_REGISTRY.update(verl_registry)


def test_documented_line_puts_the_mixin_before_every_registered_verl_trainer(
    trainer_base: ModuleType,
) -> None:
    verl_trainers = dict(trainer_base.TRAINER_REGISTRY)
    assert set(verl_trainers) >= VERL_MODES

    exec(compile(documented_registration(), str(DOCS), "exec"), {})

    for mode, verl_trainer in verl_trainers.items():
        built = trainer_base.get_trainer_cls(mode)
        assert issubclass(built, TqGcTrainerMixin), mode
        assert issubclass(built, trainer_base.PPOTrainer), mode
        assert built.__mro__[1:3] == (TqGcTrainerMixin, verl_trainer), mode


def test_documented_line_run_twice_wraps_once(trainer_base: ModuleType) -> None:
    line = compile(documented_registration(), str(DOCS), "exec")
    exec(line, {})
    wrapped = dict(trainer_base.TRAINER_REGISTRY)

    exec(line, {})

    assert wrapped == trainer_base.TRAINER_REGISTRY
