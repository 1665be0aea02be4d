"""What the CLI says when the state it is asked about lives in the sidecar: with `state_url: memory://`
the lease, the runs, the audit and the admissions are the sidecar actor's own memory, and a CLI process
would open an empty store of its own and show nothing, with exit 0."""

from __future__ import annotations

from tq_gc.config import Config
from tq_gc.errors import ConfigError
from tq_gc.sidecar.names import SIDECAR_RAY_NAMESPACE
from tq_gc.state.url import is_memory_url
from tq_gc.wiring import Runtime


def refuse_a_state_out_of_reach(runtime: Runtime, config: Config) -> None:
    """ConfigError if the state would be opened here from memory://: an empty store of this process's
    own (a state handed in, as tests do, is read)."""
    if runtime.state is None and is_memory_url(config.state_url):
        raise ConfigError(state_in_the_sidecar(runtime.sidecar_name))


def state_in_the_sidecar(sidecar_name: str) -> str:
    """Where the state is, and the ways to reach it (log-safe: memory:// holds no secret)."""
    actor = f"ray.get_actor({sidecar_name!r}, namespace={SIDECAR_RAY_NAMESPACE!r})"
    return (
        f"state_url is memory://: runs, lease, admissions and audit live in the memory of the sidecar "
        f"actor {sidecar_name!r} (Ray namespace {SIDECAR_RAY_NAMESPACE!r}), not in this process, which "
        "would read an empty store. Reach them through the sidecar's log (`tq-gc serve` prints each "
        "sweep), its metrics (where it was started with `tq-gc serve --metrics-port N`: tqgc_* series), or "
        f"from a Ray driver in the job's cluster: ray.get({actor}.status.remote()). "
        "To read them from the CLI, give the sidecar and the CLI one shared store: state_url: "
        "redis://host:6379/0 (docs/operations.md)"
    )
