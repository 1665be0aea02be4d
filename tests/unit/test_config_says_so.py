"""A config that would quietly do nothing is refused, and every refusal says where the value came from
and what was meant: a schedule that cannot reclaim, a misspelled key or TQGC_ variable."""

from __future__ import annotations

from typing import Any

import pytest

from tq_gc.config import load_config, parse_config, schedule_problem
from tq_gc.errors import ConfigError

STAGING = "rollout_staging"


def config_with(**extra: Any) -> dict[str, Any]:
    return {"namespace": "job", "scope": [{"partition": STAGING, "all_keys": True}], **extra}


def refusal(**extra: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_with(**extra))
    return str(caught.value)


# a schedule that cannot reclaim -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("grace_seconds", "schedule", "longest_gap"),
    [
        (60, {"interval_seconds": 300}, "300"),
        (60, {"interval_seconds": 31}, "31"),
        (600, {"cron": "*/10 * * * *"}, "600"),
        (3600, {"cron": "0 9 * * *"}, "86400"),
        (900, {"cron": "* 9-17 * * 1-5"}, "54060"),  # every minute of working hours: the night's gap
    ],
)
def test_a_schedule_that_cannot_reclaim_is_refused_naming_both_numbers(
    grace_seconds: float, schedule: dict[str, Any], longest_gap: str
) -> None:
    message = refusal(grace_seconds=grace_seconds, schedule=schedule)
    assert "schedule" in message and f"grace_seconds={grace_seconds}" in message
    assert longest_gap in message and "twice" in message


@pytest.mark.parametrize(
    ("grace_seconds", "schedule"),
    [
        (900, {"interval_seconds": 60}),
        (60, {"interval_seconds": 30}),
        (900, {"cron": "*/5 * * * *"}),
    ],
)
def test_a_schedule_that_sweeps_twice_per_grace_is_accepted(
    grace_seconds: float, schedule: dict[str, Any]
) -> None:
    config = parse_config(config_with(grace_seconds=grace_seconds, schedule=schedule))
    assert schedule_problem(config) is None


def test_a_short_grace_for_tests_is_accepted_by_config_but_still_named() -> None:
    config = parse_config(
        config_with(grace_seconds=5, allow_short_grace=True, schedule={"interval_seconds": 3600})
    )
    problem = schedule_problem(config)
    assert problem is not None and "3600" in problem and "grace_seconds=5" in problem


def test_no_grace_reclaims_at_every_sweep() -> None:
    config = parse_config(config_with(grace_seconds=0, allow_short_grace=True))
    assert schedule_problem(config) is None


# did you mean ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "meant"),
    [
        ({"grace_second": 900}, "grace_second", "grace_seconds"),
        ({"limits": {"max_deletes_per_rn": 5}}, "limits.max_deletes_per_rn", "max_deletes_per_run"),
        ({"scope": [{"partition": STAGING, "all_key": True}]}, "scope.0.all_key", "all_keys"),
        ({"schedule": {"intervall_seconds": 60}}, "schedule.intervall_seconds", "interval_seconds"),
    ],
)
def test_an_unknown_key_says_which_was_meant(extra: dict[str, Any], field: str, meant: str) -> None:
    message = refusal(**extra)
    assert f"{field}: unknown key" in message and f"did you mean {meant!r}?" in message


def test_an_unknown_key_like_no_other_lists_the_known_ones() -> None:
    message = refusal(limits={"zzz": 1})
    assert "limits.zzz: unknown key" in message and "max_deletes_per_run" in message


# TQGC_ variables are named ------------------------------------------------------------------------


def test_a_misspelled_variable_is_named_not_the_file(tmp_path: Any) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text(f"namespace: job\nscope: [{{partition: {STAGING}, all_keys: true}}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"TQGC_LIMITS__MAX_DELETES_PER_RN": "5"})
    message = str(caught.value)
    assert "TQGC_LIMITS__MAX_DELETES_PER_RN" in message and "max_deletes_per_run" in message
    assert f"invalid config ({path})" not in message


def test_a_bad_value_from_a_variable_names_the_variable(tmp_path: Any) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text("namespace: job\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"TQGC_LIMITS__MAX_DELETES_PER_RUN": "many"})
    message = str(caught.value)
    assert "limits.max_deletes_per_run" in message and "TQGC_LIMITS__MAX_DELETES_PER_RUN" in message


def test_a_bad_value_from_the_file_names_the_file_only(tmp_path: Any) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text("namespace: job\nlimits: {max_deletes_per_run: many}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"TQGC_GRACE_SECONDS": "900"})
    message = str(caught.value)
    assert str(path) in message and "TQGC_" not in message


def test_a_config_that_writes_no_schedule_sweeps_twice_per_grace() -> None:
    config = parse_config(config_with(grace_seconds=60))
    assert config.schedule.interval_seconds == 30 and schedule_problem(config) is None
    assert parse_config(config.model_dump()).schedule == config.schedule  # the same once written
    assert parse_config(config_with()).schedule.interval_seconds == 60  # the default grace: every 60 s
