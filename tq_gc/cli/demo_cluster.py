"""What both demos (`tq-gc demo`, `tq-gc demo --capacity`) share: lines stamped with the seconds since the
start, a local Ray cluster with a real TransferQueue that is the demo's alone and that it stops, and the
sidecar's figures it reads."""

from __future__ import annotations

import logging
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

CALL_TIMEOUT_SECONDS = 60.0


class Narrator:
    """Prints each line after the seconds since the demo started."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.started:5.1f}s[/dim]  {text}")


@contextmanager
def demo_cluster(
    tq_config: Mapping[str, Any], say: Callable[[str], None], what: str, tq_log_level: str = "ERROR"
) -> Iterator[Path]:
    """A local Ray cluster (its files in a temp dir of its own: nothing of another cluster on this machine
    is touched) and a TransferQueue made with `tq_config`; yields the temp dir. On exit, Ray's shutdown
    stops TQ, the sidecar and every worker. `tq_log_level`: what TQ's own loggers print."""
    # TQ sets its loggers' level from this when it makes them, in this process and in the workers (which
    # inherit the environment): on 2 cores every put warns about thread counts, noise for a demo.
    os.environ["TQ_LOGGING_LEVEL"] = tq_log_level
    import ray
    import torch  # noqa: F401  (CPU torch must be imported before transfer_queue)
    import transfer_queue as tq

    with tempfile.TemporaryDirectory(prefix="tq-gc-demo-") as tmp:
        try:
            say(f"starting a local Ray cluster and a TransferQueue ({what}) ...")
            ray.init(
                address="local",
                _temp_dir=str(Path(tmp) / "ray"),
                num_cpus=4,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
            tq.init(dict(tq_config))
            yield Path(tmp)
        finally:
            ray.shutdown()
            say("Ray cluster stopped; nothing left running")


def ray_get(ref: Any) -> Any:
    import ray

    return ray.get(ref, timeout=CALL_TIMEOUT_SECONDS)


def sidecar_metrics(metrics_port: int | None) -> str:
    """The sidecar's /metrics page ('' without a port)."""
    if not metrics_port:
        return ""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
    return text


def reclaimed_bytes(metrics_port: int | None) -> int:
    """tqgc_reclaimed_bytes_total from the sidecar's /metrics (0 without a port)."""
    for line in sidecar_metrics(metrics_port).splitlines():
        if line.startswith("tqgc_reclaimed_bytes_total "):
            return int(float(line.split()[1]))
    return 0
