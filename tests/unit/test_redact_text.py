"""An error message or log line that quotes a URL, or a piece of one, shows none of its secrets."""

from __future__ import annotations

import io
import json
import logging

import pytest

from tq_gc.logs import JsonLines, Redacting
from tq_gc.redaction import redact_text

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    ("text", "urls", "shown"),
    [
        (f"at gw:{SECRET}@h:1: nonnumeric port: '{SECRET}@h'", [f"gw:{SECRET}@h:1"], "at gw:***@h:1: "),
        (f"boom https://u:{SECRET}@h:1/p?token={SECRET}x&a=1 !", [], "https://u:***@h:1/p?token=***&a=1 !"),
        (
            f"ray://u:{SECRET}%40x@h:1 said {SECRET}@x",
            [f"ray://u:{SECRET}%40x@h:1"],
            "ray://u:***@h:1 said ***",
        ),
        (f"redis://h/0?password={SECRET} refused", [], "redis://h/0?password=*** refused"),
    ],
)
def test_every_secret_of_the_given_urls_and_every_url_quoted_is_hidden(
    text: str, urls: list[str], shown: str
) -> None:
    redacted = redact_text(text, urls)
    assert SECRET not in redacted and shown in redacted, redacted


def test_a_message_without_secrets_is_left_as_it_is() -> None:
    text = "could not push to http://gateway:9091: refused (a, b)"
    assert redact_text(text, ["http://gateway:9091"]) == text


@pytest.mark.parametrize("formatter", [logging.Formatter("%(message)s"), JsonLines()], ids=["text", "json"])
def test_a_log_line_and_its_exception_are_redacted(formatter: logging.Formatter) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(Redacting([f"redis://:{SECRET}@h:1/0"]))
    handler.setFormatter(formatter)
    logger = logging.getLogger("tq_gc.test_redact_text")
    logger.addHandler(handler)
    try:
        try:
            raise ValueError(f"cannot parse ':{SECRET}@h:1'")
        except ValueError:
            logger.error("failed at %s", f"redis://:{SECRET}@h:1/0", exc_info=True)
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert SECRET not in output and "ValueError" in output, output
    if isinstance(formatter, JsonLines):
        assert "ValueError" in json.loads(output)["exc"]
