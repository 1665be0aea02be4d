"""`python -m tq_gc ...`: the same as the `tq-gc` command."""

from tq_gc.cli import run

run()
