"""Logging to stderr: readable text, or JSON lines for cluster log collectors (`tq-gc --log-format json`)."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime

from tq_gc.redaction import redact_text

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


# The sidecar's log lines `tq-gc serve` may fetch: a few minutes of sweeps at the busiest schedule.
RECENT_LINES_KEPT = 1000


class RecentLines(logging.Handler):
    """The last `capacity` formatted lines, each with a sequence number, for a reader that polls (`tq-gc
    serve` reading the sidecar actor's lines, which Ray does not forward to a driver that joined with
    log_to_driver=False)."""

    def __init__(self, capacity: int = RECENT_LINES_KEPT) -> None:
        super().__init__()
        self._lines: deque[str] = deque(maxlen=capacity)
        self._next = 0  # the sequence number of the next line
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        with self._guard:
            self._lines.append(line)
            self._next += 1

    def since(self, seen: int) -> tuple[int, list[str]]:
        """(the sequence to ask from next, the lines after the first `seen`), saying how many were dropped
        if the reader fell behind."""
        with self._guard:
            first = self._next - len(self._lines)
            lines = list(self._lines)[max(seen - first, 0) :]
            dropped = first - seen
            end = self._next
        if dropped > 0:
            lines.insert(0, f"({dropped} older lines dropped)")
        return end, lines


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


def configure_logging(
    level: str, log_format: str, secret_urls: Iterable[str] = (), recent: RecentLines | None = None
) -> None:
    """Route the tq_gc logger to stderr (and to `recent`, if given), every line redacted (`secret_urls`:
    the URLs this process was given, whose secrets it hides wherever they appear); idempotent, so the
    sidecar and tests can call it again."""
    logger = logging.getLogger("tq_gc")
    redacting = Redacting(secret_urls)
    formatter = JsonLines() if log_format == "json" else logging.Formatter(_TEXT_FORMAT)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if recent is not None:
        handlers.append(recent)
    for handler in handlers:
        handler.addFilter(redacting)
        handler.setFormatter(formatter)
    logger.handlers = handlers
    logger.setLevel(level)
    logger.propagate = False
