"""Unit tests start no service, and the hypothesis profiles for the property tests.

A unit test that asks for the session's redis-server fails at once: a test that needs Redis belongs in
tests/integration/, or in tests/contract/ when it runs on every state store.

`ci` (the default) keeps the whole property suite to well under a minute on 2 cores. `thorough` runs
10,000 examples of every property that does not pin its own count: HYPOTHESIS_PROFILE=thorough. That
takes minutes per state machine, so it lifts the suite's per-test timeout too.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
THOROUGH_TIMEOUT_S = 3600

# A sweep does file and store I/O in every step: how long an example takes is not what is tested.
settings.register_profile("ci", max_examples=300, deadline=None, print_blob=True)
settings.register_profile(
    "thorough",
    max_examples=10_000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(PROFILE)


@pytest.fixture(scope="session")
def redis_server() -> NoReturn:
    pytest.fail(
        "tests/unit starts no service: a test that needs Redis belongs in tests/integration/, "
        "or in tests/contract/ when it runs on every state store"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if PROFILE == "thorough":
        for item in items:
            item.add_marker(pytest.mark.timeout(THOROUGH_TIMEOUT_S))
