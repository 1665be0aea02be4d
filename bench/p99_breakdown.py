"""Where the job's p99 excess comes from: what the sidecar was doing while the loop's slow iterations ran.

The sidecar's own TransferQueue requests are logged as spans (op, start, end; unix seconds) while a
window runs: `RequestLog.record` is wrapped in the sidecar's process through Ray's `__ray_call__`, and
unwrapped after (bench only: tq-gc itself keeps durations, not spans). A recorded duration leaves out
the wait for a quiet moment, which runs inside an index page's or key window's call: a span is the
request's work, what the job's requests can queue behind.

The store's pacing waits (`RequestLog.waited`: `quiet_wait`, `duty_pause`) are logged as spans too,
ending when each was recorded: a duty pause is recorded as it ends, a quiet wait inside a request's call
once that call returns (its span then comes a request's length late, a few ms of a 20-250 ms wait).

Each iteration of the loop is put under one activity: the op of the tq-gc request it overlapped most
(`partition_keys_window` listing, `kv_retrieve_meta` re-check or tags, `clear_samples` delete, ...),
else the pacing wait it overlapped most (tq-gc held nothing then), else the sweep phase it began in (no
request or wait of tq-gc's then: the sidecar's CPU, Redis), else "no sweep". For each activity: its
iterations, its share of the slowest 1%, and the p99 of the loop without its iterations (what the p99
would be had that activity cost the job nothing: the difference is its part of the excess).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from common import slowest_1pct

SPANS_ATTRIBUTE = "_bench_request_spans"
ORIGINAL_ATTRIBUTE = "_bench_original_record"
ORIGINAL_WAITED_ATTRIBUTE = "_bench_original_waited"
NO_SWEEP = "no sweep"
# The store's pacing waits (tq_gc.stores.transferqueue.requests.PACING_WAITS), spans like requests'.
WAITS = frozenset({"quiet_wait", "duty_pause"})

# (op, start, end) in unix seconds
Span = tuple[str, float, float]
# (phase, start, end) in unix seconds, of a sweep's report
PhaseSpan = tuple[str, float, float]


def start_request_spans(actor: Any) -> None:
    """Run in the sidecar's process: log each of tq-gc's TQ requests as a span from now on."""
    import time

    from tq_gc.stores.transferqueue.requests import RequestLog

    stop_request_spans(actor)
    spans: list[Span] = []
    original = RequestLog.record

    original_waited = RequestLog.waited

    def record(self: RequestLog, op: str, seconds: float) -> None:
        end = time.time()
        spans.append((op, end - seconds, end))
        original(self, op, seconds)

    def waited(self: RequestLog, wait: str, seconds: float) -> None:
        end = time.time()
        spans.append((wait, end - seconds, end))
        original_waited(self, wait, seconds)

    setattr(RequestLog, ORIGINAL_ATTRIBUTE, original)
    setattr(RequestLog, ORIGINAL_WAITED_ATTRIBUTE, original_waited)
    RequestLog.record = record  # type: ignore[method-assign]
    RequestLog.waited = waited  # type: ignore[method-assign]
    setattr(actor, SPANS_ATTRIBUTE, spans)


def stop_request_spans(actor: Any) -> list[Span]:
    """Run in the sidecar's process: stop logging, and the spans logged since start_request_spans."""
    from tq_gc.stores.transferqueue.requests import RequestLog

    original = RequestLog.__dict__.get(ORIGINAL_ATTRIBUTE)
    if original is not None:
        RequestLog.record = original  # type: ignore[method-assign]
        delattr(RequestLog, ORIGINAL_ATTRIBUTE)
    original_waited = RequestLog.__dict__.get(ORIGINAL_WAITED_ATTRIBUTE)
    if original_waited is not None:
        RequestLog.waited = original_waited  # type: ignore[method-assign]
        delattr(RequestLog, ORIGINAL_WAITED_ATTRIBUTE)
    spans: list[Span] = getattr(actor, SPANS_ATTRIBUTE, [])
    if hasattr(actor, SPANS_ATTRIBUTE):
        delattr(actor, SPANS_ATTRIBUTE)
    return spans


def p99_breakdown(
    loop: dict[str, Any],
    requests: Sequence[Span],
    phases: Sequence[PhaseSpan],
    percentile: Callable[..., float],
) -> dict[str, Any]:
    """By activity (module docstring): iterations, slowest-1% count, share of the window's time, and the
    loop's p99 without that activity's iterations; beside the p99 of them all. `percentile(sorted, f)`."""
    latencies, began = loop["latencies_s"], loop["began_unix"]
    if not latencies:
        return {}
    activity = [_activity(began[i], began[i] + latencies[i], requests, phases) for i in range(len(latencies))]
    slowest = Counter(activity[i] for i in slowest_1pct(latencies))
    window = (began[0], began[-1] + latencies[-1])

    def p99_without(name: str) -> float:
        kept = sorted(latency for latency, each in zip(latencies, activity, strict=True) if each != name)
        return round(1000 * percentile(kept, 0.99), 2) if kept else 0.0

    by_activity = {
        name: {
            "iterations": count,
            "slowest_1pct": slowest.get(name, 0),
            "time_share": _time_share(name, requests, phases, window),
            "p99_ms_without": p99_without(name),
        }
        for name, count in Counter(activity).most_common()
    }
    return {"p99_ms": round(1000 * percentile(sorted(latencies), 0.99), 2), "by_activity": by_activity}


def _activity(start: float, end: float, requests: Sequence[Span], phases: Sequence[PhaseSpan]) -> str:
    overlaps = Counter[str]()
    for op, op_start, op_end in requests:
        if op_start < end and op_end > start:
            overlaps[op] += min(end, op_end) - max(start, op_start)
    held = [(seconds, op) for op, seconds in overlaps.items() if op not in WAITS]
    if held or overlaps:
        return max(held or [(seconds, op) for op, seconds in overlaps.items()])[1]
    phase = next((name for name, p_start, p_end in phases if p_start <= start < p_end), None)
    return NO_SWEEP if phase is None else f"{phase} (no TQ request)"


def _time_share(
    name: str, requests: Sequence[Span], phases: Sequence[PhaseSpan], window: tuple[float, float]
) -> float | None:
    """The share of the window a request op's spans cover (None for the other activities and the waits:
    a wait holds the controller for no one)."""
    covered = sum(_overlap((start, end), window) for op, start, end in requests if op == name)
    if name in WAITS or not any(op == name for op, _, _ in requests):
        return None
    return round(covered / (window[1] - window[0]), 4)


def _overlap(span: tuple[float, float], window: tuple[float, float]) -> float:
    return max(0.0, min(span[1], window[1]) - max(span[0], window[0]))
