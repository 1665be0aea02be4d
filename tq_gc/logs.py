"""Logging to stderr: readable text, or JSON lines for cluster log collectors (`log_format: json`)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

from tq_gc.config.redaction import redact_text

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_text:  # already formatted (and redacted: Redacting)
            doc["exc"] = record.exc_text
        elif record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class Redacting(logging.Filter):
    """Hides the secrets of the URLs a process was given (redaction.redact_text) in every record this
    handler writes, its exception included: a log line may quote an error that quotes a URL."""

    def __init__(self, urls: Iterable[str]) -> None:
        super().__init__()
        self.urls = tuple(urls)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact_text(record.getMessage(), self.urls), None
        if record.exc_info:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info), self.urls)
            record.exc_info = None
        return True


def configure_logging(level: str, log_format: str, secret_urls: Iterable[str] = ()) -> None:
    """Route the tq_gc logger to stderr, every line redacted (`secret_urls`: the URLs this process was
    given, whose secrets it hides wherever they appear); idempotent, so the sidecar and tests can call
    it again."""
    logger = logging.getLogger("tq_gc")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(Redacting(secret_urls))
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(_TEXT_FORMAT))
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False
