"""The command line (`tq-gc`): the commands (commands.py), `check` (checks.py), what they print
(render.py) and the embedded demo (demo.py, simulation.py)."""

from tq_gc.cli.commands import (
    EXIT_ABORTED,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_SKIPPED,
    EXIT_USAGE,
    Runtime,
    cli,
    main,
    run,
)

__all__ = [
    "EXIT_ABORTED",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_SKIPPED",
    "EXIT_USAGE",
    "Runtime",
    "cli",
    "main",
    "run",
]
