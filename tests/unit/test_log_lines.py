"""The sidecar's recent log lines, as `tq-gc serve` streams them: a bounded buffer read by sequence."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tq_gc.cli.serve import stream_log_lines
from tq_gc.logs import RecentLines, configure_logging


@pytest.fixture
def recent() -> Iterator[RecentLines]:
    lines = RecentLines(capacity=3)
    configure_logging("INFO", "text", recent=lines)
    yield lines
    configure_logging("WARNING", "text")


def test_each_line_is_read_once_in_order(recent: RecentLines) -> None:
    log = logging.getLogger("tq_gc.sidecar.actor")
    log.info("sweep a: completed")
    log.info("sweep b: completed")
    after, lines = recent.since(0)
    assert [line.split(": ", 1)[1] for line in lines] == ["sweep a: completed", "sweep b: completed"]
    log.info("sweep c: dry_run")
    later, more = recent.since(after)
    assert later > after and len(more) == 1 and "sweep c: dry_run" in more[0]
    assert recent.since(later) == (later, [])


def test_a_reader_that_fell_behind_gets_the_newest_and_is_told(recent: RecentLines) -> None:
    log = logging.getLogger("tq_gc")
    for i in range(5):
        log.info("line %d", i)
    _, lines = recent.since(0)
    assert "2 older lines dropped" in lines[0] and [line[-6:] for line in lines[1:]] == [
        "line 2",
        "line 3",
        "line 4",
    ]


def test_serve_prints_what_the_sidecar_logged_since_it_last_asked(capsys: pytest.CaptureFixture[str]) -> None:
    logged = ["sweep a: completed, 4 deleted", "sweep b: dry_run"]

    def fetch(since: int) -> tuple[int, list[str]]:
        return len(logged), logged[since:]

    after = stream_log_lines(fetch, 0)
    assert after == 2 and capsys.readouterr().err.splitlines() == logged
    assert stream_log_lines(fetch, after) == 2 and capsys.readouterr().err == ""
