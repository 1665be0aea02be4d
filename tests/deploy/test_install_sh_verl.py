"""scripts/install.sh --dev installs the verl the verl tests drive without its dependencies: they are a GPU
training stack that would replace the pinned CPU torch, tensordict and ray."""

from __future__ import annotations

from pathlib import Path

from .test_install_sh import run_install


def test_dev_installs_verl_with_no_deps_after_the_verl_test_extra(tmp_path: Path) -> None:
    calls = run_install(tmp_path, {}, "--dev")
    tq_gc_call, verl_call = calls[-2:]
    assert "-e" in tq_gc_call and ".[test,verl-test]" in tq_gc_call
    assert verl_call[:3] == ["-m", "pip", "install"]
    assert verl_call[-2:] == ["--no-deps", "verl==0.9.1"], "nothing but verl, and none of its dependencies"
    assert not any("verl" in arg for call in calls[:-1] for arg in call if arg != ".[test,verl-test]")


def test_without_dev_no_verl_is_installed(tmp_path: Path) -> None:
    calls = run_install(tmp_path, {})
    assert not any("verl" in arg for call in calls for arg in call)
