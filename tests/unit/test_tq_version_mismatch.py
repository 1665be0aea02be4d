"""The job's controller runs another TransferQueue than tq-gc: the refusal names both versions and the
rebuild, and says which requests the controller could not decode; no difference that shows, no refusal.
`tq-gc check` names each controller function, fitting or not."""

from __future__ import annotations

from tq_gc.stores.transferqueue.attach import another_tq
from tq_gc.stores.transferqueue.controller_fit import ControllerFit
from tq_gc.stores.transferqueue.internals import INDEX_PAGES, QUIET_WAITS, READ_FROM

OURS = frozenset({"GET_META", "KV_LIST", "MARK_CLEARING", "CLEAR_META"})  # a 0.1.10 client's, in part
A_0_1_9_CONTROLLERS = frozenset({"GET_META", "KV_LIST", "CLEAR_META"})  # no MARK_CLEARING before 0.1.10


def fit(version: str | None, request_types: frozenset[str] | None = OURS) -> ControllerFit:
    return ControllerFit(version, request_types, {})


def test_the_same_tq_is_no_mismatch() -> None:
    assert another_tq(fit("0.1.10"), "0.1.10", OURS, "auto") is None


def test_another_version_names_both_and_the_rebuild() -> None:
    message = another_tq(fit("0.1.9", A_0_1_9_CONTROLLERS), "0.1.10", OURS, "ray://head:10001")
    assert message is not None
    assert "transfer_queue.ray_address='ray://head:10001'" in message
    assert "runs transferqueue 0.1.9; tq-gc here runs transferqueue 0.1.10" in message
    assert "(it cannot decode MARK_CLEARING)" in message
    assert "--build-arg TQ_VERSION=0.1.9" in message and "TQ_VERSION=0.1.9 scripts/install.sh" in message


def test_a_newer_controller_is_refused_too() -> None:
    message = another_tq(fit("0.1.11"), "0.1.9", A_0_1_9_CONTROLLERS, "auto")
    assert message is not None
    assert "runs transferqueue 0.1.11; tq-gc here runs transferqueue 0.1.9." in message


def test_a_controller_of_unknown_version_that_cannot_decode_our_requests_is_refused() -> None:
    message = another_tq(fit(None, A_0_1_9_CONTROLLERS), "0.1.10", OURS, "auto")
    assert message is not None
    assert "runs transferqueue of unknown version" in message and "MARK_CLEARING" in message
    assert "TQ_VERSION=<the job's>" in message


def test_nothing_known_is_no_refusal() -> None:
    assert another_tq(fit(None, None), "0.1.11", OURS, "auto") is None


def test_check_names_each_controller_function_and_the_versions_read() -> None:
    found = ControllerFit.from_probe(
        {
            "tq_version": "0.1.9",
            "request_types": sorted(A_0_1_9_CONTROLLERS),
            INDEX_PAGES: None,
            "key windows": None,
            QUIET_WAITS: "no request loop of the controller waits in request_handle_socket.recv_multipart",
        }
    )
    assert found.describe() == (
        f"TransferQueue 0.1.9 (read from {', '.join(READ_FROM)}); index pages: fit; key windows: fit; "
        "quiet waits: not available on this TransferQueue (no request loop of the controller waits in "
        "request_handle_socket.recv_multipart)"
    )
    assert found.request_types == A_0_1_9_CONTROLLERS


def test_a_probe_that_could_not_run_says_so() -> None:
    said = ControllerFit.unknown("TypeError: boom").describe()
    assert "could not be probed (TypeError: boom)" in said
