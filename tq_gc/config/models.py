"""The Config value and its sections, and the safety rules that refuse a config (docs/safety.md, rules 1
and 3; docs/configuration.md, "Checks at load"): every refusal says which field is wrong and what to do."""

from __future__ import annotations

from datetime import UTC
from typing import Any, ClassVar
from urllib.parse import urlsplit

from apscheduler.triggers.cron import CronTrigger
from pydantic import Field, field_validator, model_validator

from tq_gc.config.base import DURATION_WITH_UNIT, Frozen
from tq_gc.config.redaction import redact_url
from tq_gc.config.schedule_fit import default_schedule, schedule_gap_problem
from tq_gc.config.sources import ManifestSource, Owner, OwnerReference, TagReference, compile_key_pattern
from tq_gc.state.url import STATE_SCHEMES, not_a_state_url

MIN_GRACE_SECONDS = 60.0

# The canonical samples: protected even when protected_partitions leaves them out.
CANONICAL_PARTITION = "rollout_data"

# The state URL's schemes and its own options (a query parameter of a Redis state_url,
# redis://host:6379/0?wait_replicas=1) live in tq_gc/state/url.py, the one parser of it; the options are
# settings too, counted and documented with the fields (docs/configuration.md).


class ScopeEntry(Frozen):
    partition: str = Field(min_length=1)
    prefixes: tuple[str, ...] = ()
    all_keys: bool = False
    # A regular expression the whole key must match (re.fullmatch): for layouts whose transient rows
    # share no prefix with the rows to keep (verl's trajectories `{uid}_{session}_{index}` beside their
    # prompt rows `{uid}`).
    key_pattern: str | None = None
    # Rows in scope are referenced while their owner row exists in this partition (verl's trajectories
    # `{uid}_{session}_{index}` while their prompt row `{uid}`): a key template over key_pattern's groups.
    # Only rows in scope matter to it: a row out of scope is never deleted.
    owner: Owner | None = None

    @field_validator("prefixes")
    @classmethod
    def _no_catch_all_prefix(cls, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        for prefix in prefixes:
            if prefix in ("", "*"):
                raise ValueError(
                    f"prefix {prefix!r} would match every key; write `all_keys: true` to mean that"
                )
        return prefixes

    @field_validator("key_pattern")
    @classmethod
    def _narrow_key_pattern(cls, key_pattern: str | None) -> str | None:
        if key_pattern is None:
            return None
        compiled = compile_key_pattern(key_pattern)
        if compiled.fullmatch("") is not None:
            raise ValueError(
                f"{key_pattern!r} matches the empty string, so it reads as a catch-all: write "
                "`all_keys: true` to mean every key, or a pattern that needs at least one character"
            )
        return key_pattern

    @model_validator(mode="after")
    def _one_way_to_scope(self) -> ScopeEntry:
        ways = [bool(self.prefixes), self.all_keys, self.key_pattern is not None]
        if sum(ways) != 1:
            raise ValueError(
                f"scope entry for partition {self.partition!r} needs exactly one of non-empty "
                "`prefixes`, `all_keys: true` or `key_pattern`"
            )
        if self.owner is not None:
            self.owner.check_key_fits(self.key_pattern)
        return self

    @property
    def owner_reference(self) -> OwnerReference | None:
        """The entry's owner rule as the owners source reads it, or None without an owner."""
        if self.owner is None or self.key_pattern is None:
            return None
        return OwnerReference(self.partition, self.key_pattern, self.owner)


class TransferQueueConfig(Frozen):
    # How hard this process presses on the job's TransferQueue controller is not here: it is chosen where
    # the process starts (`tq-gc --duty-cycle`, start_sidecar's duty_cycle), with its default and fixed
    # values in tq_gc/stores/transferqueue/pacing.py.
    ray_address: str = "auto"


class AdmissionsConfig(Frozen):
    expect_nonempty: bool = False


class Limits(Frozen):
    max_deletes_per_run: int = Field(default=100_000, ge=0)
    max_delete_fraction: float = Field(default=0.5, gt=0.0, le=1.0, allow_inf_nan=False)
    # Below this many eligible rows the fraction guard stays quiet: at the end of a run a small staging
    # partition is legitimately all orphans.
    fraction_min_rows: ClassVar[int] = 100


class Schedule(Frozen):
    interval_seconds: float | None = Field(default=60.0, gt=0.0, allow_inf_nan=False)
    cron: str | None = None
    # A sweep started this late is still run.
    misfire_grace_seconds: ClassVar[float] = 30.0

    @model_validator(mode="after")
    def _one_trigger(self) -> Schedule:
        if self.cron is None:
            if self.interval_seconds is None:
                raise ValueError("set either interval_seconds or cron")
            return self
        # interval_seconds has a default: only one the user wrote conflicts with cron.
        if "interval_seconds" in self.model_fields_set and self.interval_seconds is not None:
            raise ValueError(
                f"both interval_seconds ({self.interval_seconds:g}) and cron ({self.cron!r}) are set: "
                "keep one of them"
            )
        _check_crontab(self.cron)
        object.__setattr__(self, "interval_seconds", None)
        return self


def _check_crontab(cron: str) -> None:
    """The sidecar builds its trigger the same way: a cron it cannot use fails here, at load."""
    try:
        CronTrigger.from_crontab(cron, timezone=UTC)
    except ValueError as exc:
        raise ValueError(
            f"cron {cron!r} is not a crontab expression ({exc}): write 5 fields, like '*/5 * * * *'"
        ) from None


class PressureConfig(Frozen):
    """Storage pressure: when the job's TransferQueue storage has less than `headroom_below` of its
    capacity free (the fullest storage unit binds), the sidecar sweeps at once and then every
    `interval_seconds` until it has not, and each sweep's report warns. It never shortens a grace or
    weakens a check: it reclaims what is already eligible, sooner. `check_seconds`: how often the
    sidecar reads the storage units between sweeps. headroom_below None (the default): off."""

    # Under pressure each sweep also audits the storage units for cells no partition owns (O(rows): reads
    # every unit's key set and the controller's index sets), into the report's storage.leftovers: when
    # they matter, and never otherwise (tq_gc/sweep/fill.py).
    headroom_below: float | None = Field(default=None, gt=0.0, lt=1.0, allow_inf_nan=False)
    # Fixed, not settings: under pressure the sidecar sweeps every 30 s, half the default schedule's 60 s,
    # while a sweep of 1M rows (its listing alone ~3 s, docs/performance.md) still ends well inside one
    # interval; sooner would mostly add listings of rows not yet due. The fill is read every 15 s, half
    # that, so pressure is seen within half an interval of coming: each read is one GET_METRICS per
    # storage unit, a few milliseconds of its worker thread (sidecar/pressure.py).
    interval_seconds: ClassVar[float] = 30.0
    check_seconds: ClassVar[float] = 15.0


class Config(Frozen):
    namespace: str = Field(default="default", pattern=r"^[A-Za-z0-9_.:-]+$")
    state_url: str = "memory://"
    transfer_queue: TransferQueueConfig = TransferQueueConfig()
    scope: tuple[ScopeEntry, ...] = ()
    protected_partitions: tuple[str, ...] = ("rollout_data",)
    allow_unsafe_scope: bool = False
    grace_seconds: float = Field(default=900.0, ge=0.0, allow_inf_nan=False)
    allow_short_grace: bool = False
    admissions: AdmissionsConfig = AdmissionsConfig()
    manifests: tuple[ManifestSource, ...] = ()
    tag_references: tuple[TagReference, ...] = ()
    limits: Limits = Limits()
    schedule: Schedule = Schedule()
    pressure: PressureConfig = PressureConfig()

    @field_validator("grace_seconds", mode="before")
    @classmethod
    def _seconds_are_numbers(cls, value: Any) -> Any:
        if isinstance(value, str) and DURATION_WITH_UNIT.match(value):
            raise ValueError(f"is in seconds: write a number such as 900, not {value!r}")
        return value

    @field_validator("state_url")
    @classmethod
    def _known_state_scheme(cls, url: str) -> str:
        scheme = urlsplit(url).scheme
        if scheme not in STATE_SCHEMES:
            raise ValueError(not_a_state_url(url))
        return url

    @model_validator(mode="after")
    def _safety_rules(self) -> Config:
        if self.grace_seconds < MIN_GRACE_SECONDS and not self.allow_short_grace:
            raise ValueError(
                f"grace_seconds={self.grace_seconds:g} is below {MIN_GRACE_SECONDS:g} s: a row staged "
                "before its reference is recorded could be deleted. Raise it, or set "
                "allow_short_grace: true (tests and demos only)"
            )
        if not self.allow_unsafe_scope:
            self._no_protected_partition_in_scope()
        partitions = [entry.partition for entry in self.scope]
        if len(partitions) != len(set(partitions)):
            raise ValueError("scope: each partition may appear once; merge the entries' prefixes")
        if "schedule" not in self.model_fields_set:  # none written: one that sweeps twice per grace
            object.__setattr__(self, "schedule", default_schedule(self.grace_seconds))
        if not self.allow_short_grace:
            problem = schedule_gap_problem(self.schedule, self.grace_seconds)
            if problem is not None:
                raise ValueError(problem)
        return self

    def _no_protected_partition_in_scope(self) -> None:
        for entry in self.scope:
            if entry.partition not in self.protected:
                continue
            why = (
                "protected_partitions"
                if entry.partition in self.protected_partitions
                else "the canonical samples, protected even when protected_partitions leaves it out"
            )
            raise ValueError(
                f"scope: partition {entry.partition!r} is protected ({why}): the trainer treats any "
                "change there as fatal. Remove it from scope, or set allow_unsafe_scope: true if you "
                "really mean it"
            )

    @property
    def owner_references(self) -> tuple[OwnerReference, ...]:
        """The owner rules of the scope entries that have one, in scope order."""
        rules = (entry.owner_reference for entry in self.scope)
        return tuple(rule for rule in rules if rule is not None)

    @property
    def protected(self) -> frozenset[str]:
        """Every partition no sweep may touch unless allow_unsafe_scope."""
        return frozenset((CANONICAL_PARTITION, *self.protected_partitions))

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "state_url" else value

    def redacted(self) -> dict[str, Any]:
        """The config as a log-safe dict (no password)."""
        data = self.model_dump(mode="json")
        data["state_url"] = redact_url(self.state_url)
        data["transfer_queue"]["ray_address"] = redact_url(self.transfer_queue.ray_address)
        return data

    def secret_urls(self) -> tuple[str, ...]:
        """Every URL this config holds, which may carry credentials: what every output hides the secrets
        of (redaction.redact_text)."""
        return (self.state_url, self.transfer_queue.ray_address)
