"""The trainer kit: what a trainer or a rollout worker adds so that tq-gc never deletes what it still needs.

    gc = GcClient.connect("redis://gc-redis:6379/0", namespace="job-42")  # or GcClient(sidecar_registry())
    with gc.holding(f"call-{call_id}", {"rollout_staging": [staging_key, *chain_keys]}):
        write_rows(...)                   # admitted before the rows are written: never unprotected
        record_reference_elsewhere(...)   # the route plan row, the manifest: durable before release
    with gc.checkpoint_fence(f"ckpt-{step}"):
        save_checkpoint(...)              # starts once no delete batch is in flight; none starts until exit
    gc.close()

`holding` is make-before-break: the admission is durable before the block runs and released only after
it, so a reference handed to another source inside the block is in place before this one goes. A
background renewer keeps every held admission alive for as long as its block runs (long calls outlive
any TTL), and admits it again if the registry lost it (a Redis restarted empty): the rows were
protected until then by the collector's own bookkeeping, which a restarted Redis has lost as well.

It renews every `renew_seconds`: by default a third of the TTL, at most RENEW_MAX_SECONDS (10 s), so
that an admission a restarted Redis lost is back within 10 s whatever the TTL, well within the
shortest grace a sweeper allows without `allow_short_grace` (60 s; its first-seen records went with
the restart too). A sweeper with a shorter grace needs a shorter `renew_seconds`: a third of it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager

from tq_gc.errors import StoreUnavailable
from tq_gc.registry import DELETE_WAIT_SECONDS, AdmissionRegistry, renew_period_seconds

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 600.0


class GcClient:
    """Admissions held for the duration of a block, renewed in the background, and checkpoint fences."""

    def __init__(
        self,
        registry: AdmissionRegistry,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        renew_seconds: float | None = None,
    ) -> None:
        self._registry = registry
        self._ttl_seconds = ttl_seconds
        self.renew_seconds = _checked_renew_seconds(renew_seconds, ttl_seconds)
        self._held: dict[str, dict[str, list[str]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_forever, name="tq-gc-renewer", daemon=True)
        self._renewer.start()

    @classmethod
    def connect(
        cls,
        url: str,
        namespace: str = "default",
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        renew_seconds: float | None = None,
    ) -> GcClient:
        """A client on the shared state store at `url`; close() closes the connection it opened."""
        renew_every = _checked_renew_seconds(renew_seconds, ttl_seconds)  # before connecting
        return cls(AdmissionRegistry.connect(url, namespace), ttl_seconds, renew_every)

    @contextmanager
    def holding(self, admission_id: str, rows: Mapping[str, Sequence[str]]) -> Iterator[str]:
        """Admit `rows` ({partition: [keys]}) before the block and release them after it.

        Raises ValueError if this client already holds `admission_id` (a nested block, another thread):
        admitting it again would replace the rows of the block holding it, and the first to end would
        release both. Give each block an id of its own."""
        copied = {partition: list(keys) for partition, keys in rows.items()}
        with self._lock:
            if admission_id in self._held:
                raise ValueError(
                    f"admission {admission_id!r} is already held by a block of this GcClient: nested or "
                    "concurrent blocks need ids of their own (the call id, the rank)"
                )
            self._held[admission_id] = copied
        try:
            self._registry.admit(admission_id, copied, self._ttl_seconds)
        except BaseException:
            with self._lock:
                self._held.pop(admission_id, None)
            raise
        try:
            yield admission_id
        finally:
            with self._lock:
                self._held.pop(admission_id, None)
            self._release(admission_id)

    def checkpoint_fence(
        self, name: str, ttl_seconds: float = 300.0, wait_seconds: float = DELETE_WAIT_SECONDS
    ) -> AbstractContextManager[str]:
        """No delete while the block runs; the block starts once no delete batch is in flight."""
        return self._registry.checkpoint_fence(name, ttl_seconds, wait_seconds)

    def close(self) -> None:
        """Stop renewing and close the connection connect() opened. Held admissions expire by their TTL."""
        self._stop.set()
        self._renewer.join(timeout=5)
        self._registry.close()

    def __enter__(self) -> GcClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _release(self, admission_id: str) -> None:
        try:
            self._registry.release(admission_id)
        except StoreUnavailable as exc:  # the block's outcome stands; the admission expires by its TTL
            log.warning("could not release admission %r (it expires after its TTL): %s", admission_id, exc)

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            self.renew_all()

    def renew_all(self) -> None:
        """Renew every held admission; admit again any the registry no longer has."""
        with self._lock:
            held = dict(self._held)
        for admission_id, rows in held.items():
            try:
                if not self._registry.renew(admission_id, self._ttl_seconds):
                    log.warning("admission %r was lost by the registry; admitting it again", admission_id)
                    self._readmit_if_held(admission_id, rows)
            except StoreUnavailable as exc:
                log.warning("could not renew admission %r (retrying): %s", admission_id, exc)

    def _readmit_if_held(self, admission_id: str, rows: dict[str, list[str]]) -> None:
        # Under the lock: a block that just ended must not have its admission brought back.
        with self._lock:
            if admission_id in self._held:
                self._registry.admit(admission_id, rows, self._ttl_seconds)


def _checked_renew_seconds(renew_seconds: float | None, ttl_seconds: float) -> float:
    """renew_seconds as given, or renew_period_seconds(ttl_seconds). Refused unless positive and at most
    half the TTL: a renewal must be able to fail once before the admission lapses."""
    if renew_seconds is None:
        return renew_period_seconds(ttl_seconds)
    if isinstance(renew_seconds, bool) or not isinstance(renew_seconds, int | float):
        raise ValueError(f"renew_seconds must be a number of seconds, got {renew_seconds!r}")
    if not math.isfinite(renew_seconds) or renew_seconds <= 0 or renew_seconds > ttl_seconds / 2:
        raise ValueError(
            f"renew_seconds must be positive and at most half of ttl_seconds ({ttl_seconds:g}), got "
            f"{renew_seconds!r}: a third of the shortest grace of the sweepers is a good value"
        )
    return float(renew_seconds)
