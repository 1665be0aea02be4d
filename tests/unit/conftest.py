"""Unit tests start no service, and the hypothesis profiles for the property tests.

A unit test that asks for the session's redis-server fails at once: a test that needs Redis belongs in
tests/integration/, or in tests/contract/ when it runs on every state store.

`ci` (the default) keeps each property to seconds and each state machine to a minute or two on 2 cores
(STATE_MACHINE_TIMEOUT_SECONDS, above the suite's default timeout). `thorough` runs 10,000 examples of
every property that does not pin its own count: HYPOTHESIS_PROFILE=thorough. That takes minutes per state
machine, so it lifts every unit test's timeout to THOROUGH_TIMEOUT_S.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
THOROUGH_TIMEOUT_S = 3600
# A state machine runs hundreds of programs of up to 30 steps, each a sweep or more, and shrinks a failure:
# TestSweepMoves took 89 s on a busy 2-core machine (most of it shrinking a failure).
STATE_MACHINE_TIMEOUT_SECONDS = 600

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


def is_state_machine(item: pytest.Item) -> bool:
    """A RuleBasedStateMachine's TestCase: its runTest is a hypothesis test."""
    run_test = getattr(getattr(item, "cls", None), "runTest", None)
    return bool(getattr(run_test, "is_hypothesis_test", False))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROFILE == "thorough":
            item.add_marker(pytest.mark.timeout(THOROUGH_TIMEOUT_S))
        elif is_state_machine(item) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(STATE_MACHINE_TIMEOUT_SECONDS))


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """An empty checkpoint directory (the NeMo RL reader tests' root)."""
    (tmp_path / "ckpt").mkdir()
    return tmp_path / "ckpt"
