"""Logging to stderr: readable text, or JSON lines for cluster log collectors (`log_format: json`)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def configure_logging(level: str, log_format: str) -> None:
    """Route the tq_gc logger to stderr; idempotent, so the sidecar and tests can call it again."""
    logger = logging.getLogger("tq_gc")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(_TEXT_FORMAT))
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False
