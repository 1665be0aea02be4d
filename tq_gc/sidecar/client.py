"""The driver side of the sidecar: start it, find it, stop it, and publish through it.

    handle = start_sidecar(config)            # from the training script (idempotent)
    registry = sidecar_registry()             # publishers: admit/renew/release through the actor
    stop_sidecar(handle)

The actor itself is tq_gc/sidecar/actor.py; `tq-gc serve` (tq_gc/cli/commands.py) runs these until a signal.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import ray

from tq_gc.config import Config, ConfigLike, as_config
from tq_gc.errors import StoreUnavailable, TqGcError
from tq_gc.publish.registry import AdmissionRegistry
from tq_gc.ray_cluster import join_ray
from tq_gc.sidecar.actor import SidecarActor
from tq_gc.sidecar.names import SIDECAR_NAME, SIDECAR_RAY_NAMESPACE
from tq_gc.sidecar.options import StartOptions
from tq_gc.sidecar.pressure import FIXED_PRESSURE_TIMING, PressureTiming
from tq_gc.state.base import AdmissionRows, AdmissionStore
from tq_gc.wiring import DEFAULT_DUTY_CYCLE, RowStoreFactory

log = logging.getLogger(__name__)

# Threads serving calls: one may wait in sweep_now() for a scheduled sweep while publishers keep
# admitting and renewing, each call a few ms.
MAX_CONCURRENCY = 16
# Creating the actor imports Ray, torch and TQ in a fresh worker: seconds on a busy 2-core node.
READY_TIMEOUT_SECONDS = 120.0
CALL_TIMEOUT_SECONDS = 30.0
NUM_CPUS = 0.1  # a fraction of a CPU: it fits beside the job


def start_sidecar(
    config: ConfigLike,
    row_store_factory: RowStoreFactory | None = None,
    pressure_timing: PressureTiming = FIXED_PRESSURE_TIMING,
    *,
    dry_run: bool = False,
    duty_cycle: float = DEFAULT_DUTY_CYCLE,
    metrics_port: int | None = None,
    change_journal: bool = False,
    name: str = SIDECAR_NAME,
) -> Any:
    """Start the sidecar actor in this Ray cluster, or return the one already running (the sidecar's
    fixed name, in the Ray namespace tq_gc: one per cluster, tq_gc/sidecar/names.py) if it was started
    with this same config and options (a retry, another driver of the same job). One running with
    another config (another job, a changed config beside a live sidecar) or other options is refused with
    TqGcError naming what differs: it is not this job's sidecar, and with memory:// its registry and lease
    are its own.

    Joins the cluster at `config.transfer_queue.ray_address` if Ray is not initialized. Returns once the
    actor is up (its state store open, its schedule started); a failed start raises TqGcError. The actor
    attaches to the job's TQ at its first sweep: until the TQ exists, sweeps end aborted with the reason.
    `row_store_factory` (default: attach to the job's TQ) runs inside the actor, so it must pickle:
    a module-level function importable in Ray's workers, or a functools.partial of one.
    `pressure_timing`: the fixed values, unless a test or a demo sets its own.

    Chosen here, not in the config (`tq-gc serve`'s options): `dry_run=True`, every sweep of the sidecar
    is a dry run, to watch what it would reclaim (reports, metrics) before letting it; `duty_cycle`, the
    most of the wall time its requests to the job's TransferQueue may take (0 < d <= 1); `metrics_port`,
    where it serves Prometheus metrics (0: any free port; None: off); `change_journal=True`, its sweeps
    list a swept partition by a change journal installed in the job's TransferQueue controller,
    re-reading only the rows changed since its last sweep (off by default; removed when the sidecar
    stops: docs/performance.md). `name`: tests only, which run many sidecars in one cluster.
    """
    config = as_config(config)
    options = StartOptions(
        dry_run=dry_run, duty_cycle=duty_cycle, metrics_port=metrics_port, change_journal=change_journal
    )
    if not ray.is_initialized():
        join_ray(config.transfer_queue.ray_address)
    handle: Any = (  # Ray's stubs do not type actor method calls (handle.method.remote)
        ray.remote(SidecarActor)
        .options(
            num_cpus=NUM_CPUS,
            max_concurrency=MAX_CONCURRENCY,  # threaded: calls are served while a sweep runs
            name=name,
            namespace=SIDECAR_RAY_NAMESPACE,
            get_if_exists=True,  # atomic find-or-create: two drivers racing get one sidecar
            lifetime=None,  # owned by this driver, dies with the job (see the module docstring)
            max_restarts=0,
        )
        .remote(config, row_store_factory, pressure_timing, options, name)
    )
    try:
        ray.get(handle.status.remote(), timeout=READY_TIMEOUT_SECONDS)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
        # Ray's message is the actor's whole traceback; its last line is the error that stopped it.
        lines = [line for line in str(exc).splitlines() if line.strip()]
        raise TqGcError(f"the tq-gc sidecar {name!r} did not start: {lines[-1] if lines else exc}") from exc
    _check_same_config(handle, config, name)
    _check_same_options(handle, options, name)
    return handle


def wait_for_warm_up(handle: Any, timeout_seconds: float = READY_TIMEOUT_SECONDS) -> bool:
    """Wait until the sidecar has imported TransferQueue (its start's 3-6 s of CPU, which on a starved
    machine can hold up its first calls past their deadline); False if it still had not after
    `timeout_seconds`. A job that starts its own work beside the sidecar's start need not wait: the
    demos do, so that a slow machine slows them instead of failing them."""
    deadline = time.monotonic() + timeout_seconds
    while ray.get(handle.status.remote(), timeout=timeout_seconds)["warming_up"]:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _check_same_config(handle: Any, config: Config, name: str) -> None:
    """Refuse a running sidecar of this name that was started with another config."""
    running: Config = ray.get(handle.started_with.remote(), timeout=CALL_TIMEOUT_SECONDS)
    if running == config:
        return
    ours, theirs = config.model_dump(), running.model_dump()
    differing = sorted(field for field in ours.keys() | theirs.keys() if ours.get(field) != theirs.get(field))
    # Field names only: a value may be a state_url with its password.
    raise TqGcError(
        f"a tq-gc sidecar named {name!r} already runs in Ray namespace {SIDECAR_RAY_NAMESPACE!r}, "
        f"started with another config (differing: {', '.join(differing)}; its namespace is "
        f"{running.namespace!r}, this one's {config.namespace!r}). It is not this job's sidecar: one "
        "sidecar per Ray cluster (TransferQueue runs one controller per cluster), so stop that one first. "
        "With state_url memory:// each sidecar holds a registry and lease of its own, so a job needs "
        "exactly one sidecar"
    )


def _check_same_options(handle: Any, options: StartOptions, name: str) -> None:
    """Refuse a running sidecar of this name started otherwise (dry run or deleting, its duty cycle, its
    metrics port, its change journal)."""
    running: StartOptions = ray.get(handle.started_how.remote(), timeout=CALL_TIMEOUT_SECONDS)
    differing = running.differing(options)
    if not differing:
        return
    raise TqGcError(
        f"a tq-gc sidecar named {name!r} already runs with this config, but started otherwise: "
        f"{', '.join(differing)}. Stop that one first to change how it sweeps"
    )


def stop_sidecar(handle: Any, timeout_seconds: float = CALL_TIMEOUT_SECONDS) -> None:
    """Shut the sidecar down cleanly (closing what it opened), then end its actor."""
    try:
        ray.get(handle.shutdown.remote(), timeout=timeout_seconds)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
        log.warning("sidecar did not shut down cleanly (%s); killing it", exc)
    ray.kill(handle, no_restart=True)


class SidecarAdmissionBackend(AdmissionStore):
    """An AdmissionStore that forwards each call to the sidecar actor and waits for its answer: a
    write has been applied by the actor when the call returns. Errors reach the publisher as
    StoreUnavailable (sidecar gone or not answering) or as the actor raised them.

    Given the sidecar's `name` and Ray `namespace` (sidecar_registry does), a call the actor can no
    longer answer (it died) looks the name up again: a sidecar started again under it (by the user, or
    by Ray) gets the call, and every later one. Its registry starts empty; GcClient's renewer admits
    again what it holds at its next renewal (renew answers False), well within the grace the new
    sidecar waits before any delete (its first-seen records started empty with it)."""

    def __init__(
        self,
        handle: Any,
        timeout_seconds: float = CALL_TIMEOUT_SECONDS,
        name: str | None = None,
        namespace: str | None = None,
    ) -> None:
        self._handle = handle
        self._timeout_seconds = timeout_seconds
        self._name = name
        self._namespace = namespace
        self._pid = os.getpid()

    def _call(self, method: str, *args: Any) -> Any:
        if os.getpid() != self._pid:
            # Ray does not support a forked driver or worker: a call would hang or crash the child.
            raise TqGcError(
                "this sidecar registry was made in another process, which forked this one: Ray calls do "
                "not survive a fork. Make the child its own: GcClient(sidecar_registry(...)) in the child"
            )
        handle = self._handle
        try:
            return self._call_on(handle, method, *args)
        except ray.exceptions.RayActorError as exc:
            found = self._found_again(handle)
            if found is None:
                raise StoreUnavailable(f"the tq-gc sidecar did not answer {method}: {exc}") from exc
        self._handle = found
        try:
            return self._call_on(found, method, *args)
        except ray.exceptions.RayActorError as exc:
            raise StoreUnavailable(f"the tq-gc sidecar started again did not answer {method}: {exc}") from exc

    def _call_on(self, handle: Any, method: str, *args: Any) -> Any:
        try:
            return ray.get(getattr(handle, method).remote(*args), timeout=self._timeout_seconds)
        except ray.exceptions.GetTimeoutError as exc:
            raise StoreUnavailable(f"the tq-gc sidecar did not answer {method}: {exc}") from exc

    def _found_again(self, dead: Any) -> Any | None:
        """The actor now under the sidecar's name, if it is not `dead`; None if none is (yet)."""
        if self._name is None:
            return None
        try:
            found = ray.get_actor(self._name, namespace=self._namespace)
        except ValueError:  # none under that name (yet): the caller retries
            return None
        if found == dead:  # the same actor (handles compare by actor id): Ray still lists the dead one
            return None
        log.warning("the tq-gc sidecar %r was started again: publishing to the new one", self._name)
        return found

    def grace_seconds(self) -> float:
        """The sidecar's grace: what a client's renewals must come well within (a third of it)."""
        config: Config = self._call("started_with")
        return config.grace_seconds

    def admit(self, admission_id: str, rows: AdmissionRows, ttl_ms: int) -> None:
        self._call("admit", admission_id, rows, ttl_ms)

    def renew_admission(self, admission_id: str, ttl_ms: int) -> bool:
        return bool(self._call("renew_admission", admission_id, ttl_ms))

    def release_admission(self, admission_id: str) -> None:
        self._call("release_admission", admission_id)

    def live_admissions(self) -> dict[str, AdmissionRows]:
        live: dict[str, AdmissionRows] = self._call("live_admissions")
        return live

    def raise_fence(self, name: str, ttl_ms: int) -> None:
        self._call("raise_fence", name, ttl_ms)

    def lower_fence(self, name: str) -> None:
        self._call("lower_fence", name)

    def live_fences(self) -> dict[str, int]:
        fences: dict[str, int] = self._call("live_fences")
        return fences

    def delete_in_flight(self) -> bool:
        return bool(self._call("delete_in_flight"))


def sidecar_registry(
    name: str = SIDECAR_NAME, namespace: str = SIDECAR_RAY_NAMESPACE, ray_address: str = "auto"
) -> AdmissionRegistry:
    """The admission registry hosted by the running sidecar, for publishers (same API as
    AdmissionRegistry.connect). Joins Ray at `ray_address` if this process has not yet."""
    return AdmissionRegistry(sidecar_admissions(name, namespace, ray_address))


def sidecar_admissions(
    name: str = SIDECAR_NAME, namespace: str = SIDECAR_RAY_NAMESPACE, ray_address: str = "auto"
) -> SidecarAdmissionBackend:
    """The running sidecar's admissions and fences (its memory:// state), for publishers and for the CLI's
    reads of what the sidecar's sweeps see. Joins Ray at `ray_address` if this process has not yet;
    TqGcError if no such sidecar runs."""
    if not ray.is_initialized():
        join_ray(ray_address)
    try:
        handle = ray.get_actor(name, namespace=namespace)
    except ValueError as exc:
        raise TqGcError(
            f"no tq-gc sidecar named {name!r} in Ray namespace {namespace!r}: start it first "
            "(tq_gc.start_sidecar(config) or `tq-gc serve`)"
        ) from exc
    return SidecarAdmissionBackend(handle, name=name, namespace=namespace)


__all__ = [
    "SidecarAdmissionBackend",
    "sidecar_admissions",
    "sidecar_registry",
    "start_sidecar",
    "stop_sidecar",
    "wait_for_warm_up",
]
