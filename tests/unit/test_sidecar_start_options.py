"""What is chosen where a sidecar starts (start_sidecar's keywords, `tq-gc serve`'s options): checked when
given, and compared with a running sidecar's, naming what differs."""

from __future__ import annotations

import math

import pytest

from tq_gc.errors import ConfigError
from tq_gc.sidecar.options import StartOptions
from tq_gc.wiring import DEFAULT_DUTY_CYCLE, Runtime, StoreOptions


@pytest.mark.parametrize("duty_cycle", [0.0, -0.5, 1.5, math.nan, math.inf])
def test_a_duty_cycle_outside_zero_to_one_is_refused(duty_cycle: float) -> None:
    with pytest.raises(ConfigError, match=r"duty_cycle: .* above 0 and at most 1"):
        StartOptions(duty_cycle=duty_cycle)


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_metrics_port_that_is_no_port_is_refused(port: int) -> None:
    with pytest.raises(ConfigError, match="metrics_port"):
        StartOptions(metrics_port=port)


def test_the_options_that_differ_are_named_with_both_values() -> None:
    running = StartOptions(dry_run=True, duty_cycle=0.5, metrics_port=0, change_journal=True)
    assert (
        running.differing(StartOptions(dry_run=True, duty_cycle=0.5, metrics_port=0, change_journal=True))
        == []
    )
    assert running.differing(StartOptions()) == [
        "dry_run=True (this start: False)",
        "duty_cycle=0.5 (this start: 0.25)",
        "metrics_port=0 (this start: None)",
        "change_journal=True (this start: False)",
    ]


def test_the_change_journal_is_off_unless_asked() -> None:
    assert StartOptions().change_journal is False
    assert Runtime().store_options == StoreOptions(duty_cycle=DEFAULT_DUTY_CYCLE, change_journal=False)
