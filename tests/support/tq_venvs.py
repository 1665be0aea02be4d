"""Where the venv of each supported TransferQueue is: the main `.venv` has the newest, and
`TQ_VERSION=<v> scripts/install.sh --dev` makes `.venv-tq<v>` for each older one (scripts/test does)."""

from __future__ import annotations

from pathlib import Path

from tq_gc.stores.transferqueue.internals import READ_FROM

ROOT = Path(__file__).resolve().parents[2]
NEWEST = READ_FROM[-1]


def venv_of(version: str) -> Path:
    return ROOT / ".venv" if version == NEWEST else ROOT / f".venv-tq{version}"


def python_of(version: str) -> Path:
    """The venv's interpreter; an AssertionError that says how to make it when it is not there."""
    python = venv_of(version) / "bin" / "python"
    make = "scripts/install.sh --dev"
    if version != NEWEST:
        make = f"TQ_VERSION={version} {make}"
    assert python.exists(), f"no venv with TransferQueue {version} at {python.parent.parent}: run `{make}`"
    return python
