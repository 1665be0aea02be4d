"""The tq-gc CLI as a user runs it: the console script, in an environment that joins the test cluster."""

from __future__ import annotations

import sys
from pathlib import Path

from tools.testbed.ray_head import subprocess_env

TQ_GC = Path(sys.executable).with_name("tq-gc")  # the console script users run


def cli_env() -> dict[str, str]:
    """The environment a CLI subprocess needs to join the test cluster, without TQGC_... variables:
    the config file alone says what the CLI does."""
    return {k: v for k, v in subprocess_env().items() if not k.startswith("TQGC_")}
