"""`tq-gc check`: validate config, reach every store and source, touch nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tq_gc.config import Config, ManifestSource, OwnerReference
from tq_gc.errors import TqGcError
from tq_gc.model import KeysByPartition
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.references.manifests import ManifestsSource
from tq_gc.references.owners import OwnersSource
from tq_gc.references.tags import TagsSource
from tq_gc.state import RedisState
from tq_gc.state.base import StateStore
from tq_gc.stores import RowStore
from tq_gc.stores.base import optional_method
from tq_gc.wiring import Runtime

CheckResult = dict[str, Any]
NEMO_RL = "nemo_rl_recovery"


def _check(name: str, probe: Callable[[], str]) -> CheckResult:
    try:
        return {"name": name, "ok": True, "detail": probe()}
    except TqGcError as exc:
        return {"name": name, "ok": False, "detail": str(exc)}
    except Exception as exc:
        return {"name": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"}


def run_checks(config: Config, runtime: Runtime) -> list[CheckResult]:
    """Every check, in order; the stores are opened for the checks and closed after (only those opened)."""
    scope = ", ".join(e.partition for e in config.scope) or "EMPTY: nothing would ever be collected"
    results = [
        {"name": "config", "ok": bool(config.scope), "detail": f"namespace {config.namespace}; scope {scope}"}
    ]
    with runtime.stores(config) as (state, rows):
        assert rows is not None
        results.append(_check("state store", _probe_state(state, config)))
        if isinstance(state, RedisState):
            results.append(_eviction_check(state))
        results.append(
            _check("admissions", lambda: _count(AdmissionsSource(state, False).read(), "rows held"))
        )
        row_store = _check("row store", _probe_rows(config, rows))
        results.append(row_store)
        controller_fit = optional_method(rows, "controller_fit") if row_store["ok"] else None
        fit = controller_fit() if controller_fit is not None else None
        if fit is not None:  # a function that does not fit falls back to TQ's own calls: said, not failed
            results.append({"name": "TransferQueue controller functions", "ok": True, "detail": fit})
        files = tuple(source for source in config.manifests if source.format != NEMO_RL)
        results.append(_check("manifests", lambda: _count(ManifestsSource(files).read(), "rows named")))
        results += [_nemo_rl_check(source) for source in config.manifests if source.format == NEMO_RL]
        if row_store["ok"]:
            tags = TagsSource(config.tag_references, rows)
            results.append(_check("tag references", lambda: _count(tags.read(), "rows named")))
            results += [
                _check(f"owner reference {reference.partition}", _probe_owners(reference, rows))
                for reference in config.owner_references
            ]
    return results


def _nemo_rl_check(source: ManifestSource) -> CheckResult:
    """What one NeMo RL recovery glob finds: checkpoints, rows, or a checkpoint being written."""
    name = f"nemo_rl_recovery {source.glob}"
    [summary] = ManifestsSource([source]).describe()
    if summary.in_progress:
        writing = ", ".join(summary.in_progress)
        detail = f"a checkpoint is being written ({writing}): sweeps skip until it is committed"
        return {"name": name, "ok": True, "detail": detail}
    if summary.error is not None:
        return {"name": name, "ok": False, "detail": summary.error}
    checkpoints = ", ".join(path.parent.name for path in summary.files) or "none yet"
    detail = (
        f"{len(summary.files)} committed checkpoint(s) ({checkpoints}), "
        f"{summary.rows} rows named in {source.partition}"
    )
    return {"name": name, "ok": True, "detail": detail}


def _probe_owners(reference: OwnerReference, rows: RowStore) -> Callable[[], str]:
    def probe() -> str:
        [found] = OwnersSource([reference], rows).describe()
        owners = "" if found.owner_partition == found.partition else f" in {found.owner_partition}"
        return (
            f"{found.rows} rows in {found.partition}, {found.matched} with an owner key: {found.owned} owner "
            f"present{owners} (kept), {found.orphaned} owner absent (unreferenced)"
        )

    return probe


def _probe_state(state: StateStore, config: Config) -> Callable[[], str]:
    def probe() -> str:
        now_ms = state.now_ms()
        lease = state.lease_holder()
        holder = "free" if lease is None else f"held by {lease.holder}"
        return f"{config.redacted()['state_url']}: clock {now_ms} ms, lease {holder}"

    return probe


def _eviction_check(state: RedisState) -> CheckResult:
    """Redis evicting tq-gc's keys could drop the lease (two sweepers) or an admission's rows."""
    policy = state.eviction_policy()
    if policy is None:
        detail = "maxmemory-policy unknown (CONFIG GET refused): make sure it is noeviction"
        return {"name": "state store memory policy", "ok": True, "detail": detail}
    if policy != "noeviction":
        detail = (
            f"maxmemory-policy is {policy}: under memory pressure Redis may evict tq-gc's lease or "
            "admissions. Set maxmemory-policy noeviction (or give tq-gc a Redis of its own)"
        )
        return {"name": "state store memory policy", "ok": False, "detail": detail}
    return {"name": "state store memory policy", "ok": True, "detail": "noeviction"}


def _probe_rows(config: Config, rows: RowStore) -> Callable[[], str]:
    listing = optional_method(rows, "list_keys") or rows.list_rows  # keys are enough to count, cheaper

    def probe() -> str:
        sizes = ", ".join(f"{e.partition}: {len(listing(e.partition))} rows" for e in config.scope)
        return sizes or "reachable"

    return probe


def _count(rows: KeysByPartition, what: str) -> str:
    return f"{sum(len(keys) for keys in rows.values())} {what}"
