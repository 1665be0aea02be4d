"""Config refuses, at load, every value that would make a sweep unsafe or wedge it later.

Each refusal names the field and the fix; each bound is checked on both sides.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tq_gc.config import Config, parse_config
from tq_gc.errors import ConfigError

STAGING = "rollout_staging"
CANONICAL = "rollout_data"


def config_with(yaml_text: str = "{}") -> dict[str, Any]:
    """A valid config plus the YAML given (parsed as a user's file would be: `.inf` is a float)."""
    extra = yaml.safe_load(yaml_text)
    base: dict[str, Any] = {"namespace": "job", "scope": [{"partition": STAGING, "all_keys": True}]}
    return {**base, **extra}


def refusal(yaml_text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_with(yaml_text))
    return str(caught.value)


# protected partitions ----------------------------------------------------------------------------


@pytest.mark.parametrize("protected", ["[]", "[other_partition]"])
def test_the_canonical_partition_stays_protected_whatever_protected_partitions_says(protected: str) -> None:
    message = refusal(
        f"protected_partitions: {protected}\nscope: [{{partition: {CANONICAL}, all_keys: true}}]"
    )
    assert CANONICAL in message and "allow_unsafe_scope: true" in message


def test_allow_unsafe_scope_still_admits_the_canonical_partition() -> None:
    config = parse_config(
        config_with(
            f"protected_partitions: []\nallow_unsafe_scope: true\n"
            f"scope: [{{partition: {CANONICAL}, all_keys: true}}]"
        )
    )
    assert [entry.partition for entry in config.scope] == [CANONICAL]


def test_a_listed_partition_is_protected_beside_the_canonical_one() -> None:
    message = refusal("protected_partitions: [archive]\nscope: [{partition: archive, all_keys: true}]")
    assert "'archive' is protected" in message


# finite numbers ----------------------------------------------------------------------------------

FLOAT_FIELDS = [
    ("grace_seconds", "grace_seconds: {}"),
    ("schedule.interval_seconds", "schedule: {{interval_seconds: {}}}"),
    ("limits.max_delete_fraction", "limits: {{max_delete_fraction: {}}}"),
]


@pytest.mark.parametrize("value", [".inf", ".nan"])
@pytest.mark.parametrize(("field", "template"), FLOAT_FIELDS, ids=[f for f, _ in FLOAT_FIELDS])
def test_every_float_field_must_be_finite(field: str, template: str, value: str) -> None:
    message = refusal(template.format(value))
    assert f"{field}: " in message and "finite" in message


# schedule ----------------------------------------------------------------------------------------


def test_interval_and_cron_together_are_refused() -> None:
    message = refusal("schedule: {interval_seconds: 60, cron: '*/5 * * * *'}")
    assert "schedule" in message and "interval_seconds" in message and "cron" in message


def test_cron_alone_leaves_no_interval_and_the_default_interval_stays_otherwise() -> None:
    assert parse_config(config_with("schedule: {cron: '*/5 * * * *'}")).schedule.interval_seconds is None
    assert parse_config(config_with("schedule: {interval_seconds: null, cron: '*/7 * * * *'}")).schedule.cron
    assert parse_config(config_with()).schedule.interval_seconds == 60


def test_cron_is_accepted() -> None:
    config: Config = parse_config(config_with("schedule: {cron: '*/2 * * * *'}"))
    assert config.schedule.cron == "*/2 * * * *"


@pytest.mark.parametrize(
    "cron", ["61 * * * *", "* * 32 * *", "*/5 * * * mon-funday", "* * * *", "0 0 * * * *"]
)
def test_a_bad_cron_fails_at_load(cron: str) -> None:
    message = refusal(f"schedule: {{cron: '{cron}'}}")
    assert "schedule" in message and repr(cron) in message
