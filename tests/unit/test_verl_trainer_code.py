"""verl 0.9.1's trainer code, read from the installed package: the order tq_gc.integrations.verl relies on
and tools/testbed/verl_job.py's trainer replays, read with `ast` (the trainer's methods cannot run without a
cluster and models). The registry itself is imported for real in tests/unit/test_verl_trainer_registry.py,
the replay buffer and padding run for real in tests/integration/test_verl_replay_buffer.py."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator

import pytest

from tools.testbed.verl_job import VerlShapedTrainer, verl_source
from tq_gc.errors import ConfigError
from tq_gc.integrations.verl import CONFIG_ENV, TqGcTrainerMixin, wrap_registered_trainers

V1 = ("trainer", "ppo", "v1")
OVERRIDDEN = {
    "_build_replay_buffer",
    "_balance_batch",
    "_save_checkpoint",
    "on_step_begin",
    "on_validate_begin",
    "on_validate_end",
    "on_train_end",
}


def parsed(*parts: str) -> ast.Module:
    return ast.parse(verl_source(*parts).read_text())


def method(module: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    [found] = [
        node
        for klass in module.body
        if isinstance(klass, ast.ClassDef) and klass.name == cls
        for node in klass.body
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    return found


def calls(function: ast.AST) -> Iterator[str]:
    """Each call in `function`, in source order, as its dotted name (`self.on_step_begin`, `tq.kv_clear`)."""
    found = [node for node in ast.walk(function) if isinstance(node, ast.Call)]
    for node in sorted(found, key=lambda call: (call.lineno, call.col_offset)):
        yield ast.unparse(node.func)


def in_order(function: ast.AST, *expected: str) -> list[str]:
    """The first call of each of `expected` in `function`, in source order."""
    seen = [name for name in calls(function) if name in expected]
    return list(dict.fromkeys(seen))


TRAINER = parsed(*V1, "trainer_base.py")


def test_the_fit_loop_clears_the_batch_after_the_checkpoint_the_step_end_and_validation() -> None:
    [loop] = [node for node in ast.walk(method(TRAINER, "PPOTrainer", "fit")) if isinstance(node, ast.While)]
    order = [
        "self.on_step_begin",
        "self.step",
        "self._save_checkpoint",
        "self.on_step_end",
        "self.on_validate_begin",
        "self._validate",
        "self.on_validate_end",
        "tq.kv_clear",
    ]
    assert in_order(loop, *order) == order
    # the clear is the step's batch, and no hook follows it inside the iteration
    [clear] = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and ast.unparse(n.func) == "tq.kv_clear"]
    assert ast.unparse(clear) == "tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)"
    hooks = [name for name in calls(loop) if name.startswith("self.on_")]
    assert hooks[-1] == "self.on_validate_end"


def test_a_step_samples_then_pads_and_the_checkpoint_saves_the_transfer_queue() -> None:
    step_once = method(TRAINER, "PPOTrainer", "_step_once")
    order = ["self.on_sample_begin", "self.replay_buffer.sample", "self.on_sample_end", "self._balance_batch"]
    assert in_order(step_once, *order) == order
    assert "upsample_batch_to_divisible_size" in calls(method(TRAINER, "PPOTrainer", "_balance_batch"))
    assert "tq.save_checkpoint" in calls(method(TRAINER, "PPOTrainer", "_save_checkpoint"))
    assert "tq.load_checkpoint" in calls(method(TRAINER, "PPOTrainer", "_load_checkpoint"))
    validate = method(TRAINER, "PPOTrainer", "_validate")
    assert in_order(validate, "self.replay_buffer.sample", "tq.kv_clear") == [
        "self.replay_buffer.sample",
        "tq.kv_clear",
    ]
    assert "self._build_replay_buffer" in calls(method(TRAINER, "PPOTrainer", "__init__"))


def test_sample_clears_the_prompt_rows_in_materialize_batch_before_returning_the_batch() -> None:
    buffer = parsed(*V1, "replay_buffer.py")
    materialize = method(buffer, "ReplayBuffer", "_materialize_batch")
    first = next(calls(materialize))
    assert first == "tq.kv_clear"
    for cls in ("ReplayBuffer", "ReplayBufferAsync"):
        assert "self._materialize_batch" in calls(method(buffer, cls, "sample"))
    assert "tq.kv_list" in calls(method(buffer, "ReplayBuffer", "_sync_metadata_from_transfer_queue"))


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_the_mixin_overrides_verl_methods_taking_what_verl_passes(name: str) -> None:
    verl_params = [arg.arg for arg in method(TRAINER, "PPOTrainer", name).args.args]
    ours = inspect.signature(getattr(TqGcTrainerMixin, name)).parameters.values()
    named = [p.name for p in ours if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    rest = {p.kind for p in ours} >= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    assert verl_params[: len(named)] == named and (rest or len(named) == len(verl_params))
    assert hasattr(VerlShapedTrainer, name)


def test_the_mixin_overrides_nothing_else() -> None:
    own = {name for name, value in vars(TqGcTrainerMixin).items() if inspect.isfunction(value)}
    assert own - {"tq_gc_client", "_tq_gc"} == OVERRIDDEN


def test_wrapping_verl_registry_puts_the_mixin_first_in_every_trainer_once() -> None:
    class Async(VerlShapedTrainer):
        pass

    registry: dict[str, type] = {"colocate_async": Async, "separate_async": VerlShapedTrainer}
    wrap_registered_trainers(registry)
    wrapped = dict(registry)
    for mode, original in (("colocate_async", Async), ("separate_async", VerlShapedTrainer)):
        assert registry[mode].__mro__[1:3] == (TqGcTrainerMixin, original)
        assert registry[mode].__name__ == original.__name__
    wrap_registered_trainers(registry)
    assert registry == wrapped


def test_a_trainer_with_no_config_says_how_to_give_it_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with pytest.raises(ConfigError, match="TQGC_CONFIG"):
        TqGcTrainerMixin().tq_gc_client()
