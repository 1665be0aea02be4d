"""The claim's words for a state store: the address shown to people never holds a secret and is never
compared; the refusal names the holder, both states and what to do. (Which store a sweeper's state is,
read from the store itself: tests/integration/test_claim_store_identity.py.)"""

from __future__ import annotations

from tq_gc.stores.claims import refusal, state_address

SIDECAR = "sidecar:tq-gc@node-1:4242"


def test_no_secret_in_an_address() -> None:
    address = state_address("rediss://admin:hunter2@h:6380/4?ssl_password=pw", "cli@a:1")
    assert "hunter2" not in address and "pw" not in address
    assert address.startswith("rediss://admin:***@h:6380/4")


def test_memory_state_is_shown_as_its_host_process() -> None:
    assert SIDECAR in state_address("memory://", SIDECAR)


def test_a_refusal_names_the_holder_both_states_and_what_to_do() -> None:
    theirs = {"identity": "state store memory-1 namespace 'job-1'", "holder": SIDECAR, "token": "a"}
    theirs["where"] = state_address("memory://", SIDECAR)
    ours = {"identity": "state store redis-2 namespace 'job-1'", "holder": "cli@b:2", "token": "b"}
    ours["where"] = state_address("redis://:secret@h/0", "cli@b:2")
    reason = refusal(ours, theirs)
    assert reason is not None
    assert SIDECAR in reason and "memory://" in reason and "redis://:***@h/0" in reason
    assert "memory-1" in reason and "redis-2" in reason and "secret" not in reason
    assert "deleted nothing" in reason and "same state_url and namespace" in reason


def test_one_state_shares_the_claim_whatever_its_address() -> None:
    identity = "state store redis-2 namespace 'job-1'"
    theirs = {"identity": identity, "where": "redis://localhost/1", "holder": SIDECAR, "token": "a"}
    ours = {"identity": identity, "where": "redis://127.0.0.1/0?db=1", "holder": "cli@b:2", "token": "b"}
    assert refusal(ours, theirs) is None
