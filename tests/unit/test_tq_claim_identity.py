"""A state store's identity for the TQ claim: equal exactly when two sweepers share one store, and never
with a secret in it; the refusal names the holder and what to do."""

from __future__ import annotations

import pytest

from tq_gc.stores.transferqueue.claim import refusal, state_identity

SIDECAR = "sidecar:tq-gc@node-1:4242"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("redis://h:6379/0", "redis://h:6379"),
        ("redis://h/0", "redis://H:6379/0"),
        ("redis://:secret@h:6379/2", "redis://user:other@h:6379/2"),
        ("redis://h:6379?db=3", "redis://h:6379/3"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock?db=0"),
    ],
)
def test_one_store_written_two_ways_is_one_identity(one: str, other: str) -> None:
    assert state_identity(one, "job-1", "cli@a:1") == state_identity(other, "job-1", "cli@b:2")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("redis://h:6379/0", "job-1"), ("redis://h:6379/1", "job-1")),  # another DB
        (("redis://h:6379/0", "job-1"), ("redis://h:6379/0", "job-2")),  # another namespace
        (("redis://h:6379/0", "job-1"), ("redis://g:6379/0", "job-1")),  # another server
        (("redis://h:6379/0", "job-1"), ("redis://h:6380/0", "job-1")),
        (("unix:///a.sock", "job-1"), ("unix:///b.sock", "job-1")),
    ],
)
def test_different_stores_are_different_identities(one: tuple[str, str], other: tuple[str, str]) -> None:
    assert state_identity(*one, "cli@a:1") != state_identity(*other, "cli@a:1")


def test_memory_state_is_its_host_process_alone() -> None:
    """Each memory:// store lives in the sidecar (or CLI run) that hosts it: two hosts share nothing,
    whatever their namespace."""
    one = state_identity("memory://", "job-1", SIDECAR)
    assert one == state_identity("memory://", "job-1", SIDECAR)
    assert one != state_identity("memory://", "job-1", "sidecar:tq-gc-2@node-1:4243")
    assert SIDECAR in one


def test_no_secret_in_an_identity() -> None:
    identity = state_identity("rediss://admin:hunter2@h:6380/4", "job-1", "cli@a:1")
    assert "hunter2" not in identity and "admin" not in identity
    assert identity == "rediss://h:6380/4 namespace 'job-1'"


def test_a_refusal_names_the_holder_both_states_and_what_to_do() -> None:
    theirs = {"identity": state_identity("memory://", "job-1", SIDECAR), "holder": SIDECAR, "token": "a"}
    ours = {"identity": state_identity("redis://h/0", "job-1", "cli@b:2"), "holder": "cli@b:2", "token": "b"}
    reason = refusal(ours, theirs)
    assert reason is not None
    assert SIDECAR in reason and "memory://" in reason and "redis://h:6379/0" in reason
    assert "deleted nothing" in reason and "same state_url and namespace" in reason


def test_one_state_shares_the_claim() -> None:
    identity = state_identity("redis://h/0", "job-1", "x")
    theirs = {"identity": identity, "holder": SIDECAR, "token": "a"}
    assert refusal({"identity": identity, "holder": "cli@b:2", "token": "b"}, theirs) is None
