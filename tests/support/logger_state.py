"""The `tq_gc` logger as a test found it: the CLI, run in process, points it at the captured stderr and
stops it propagating (tq_gc.logs.configure_logging)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def tq_gc_logger_restored() -> Iterator[None]:
    """Give the `tq_gc` logger back its handlers, level and propagation at the end of the block."""
    logger = logging.getLogger("tq_gc")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        yield
    finally:
        logger.handlers, logger.propagate = handlers, propagate
        logger.setLevel(level)
