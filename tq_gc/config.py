"""Configuration: a frozen, validated value. Loaded from YAML, then env `TQGC_...`, then flags.

Every refusal here enforces a safety rule of DESIGN.md and says which field is wrong and what to do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import UTC
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote_plus, urlsplit

import yaml
from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tq_gc.errors import ConfigError
from tq_gc.references.keypath import split_key_path
from tq_gc.references.keytemplate import KeyTemplate

MIN_GRACE_SECONDS = 60.0
# Below, a sweep could lose its lease between two renewals; above, a crashed sweeper blocks the next
# one for over an hour.
MIN_LEASE_TTL_SECONDS = 5.0
MAX_LEASE_TTL_SECONDS = 3600.0
# The canonical samples: protected even when protected_partitions leaves them out.
CANONICAL_PARTITION = "rollout_data"
# Where NeMo RL's data plane stages rows (the rows its recovery inventory names).
NEMO_RL_STAGING_PARTITION = "rollout_staging"
STATE_SCHEMES = ("memory", "redis", "rediss", "unix")
ENV_PREFIX = "TQGC_"
# TQGC_ variables that are not config: the config file's path, and scripts/install.sh's own settings.
NOT_CONFIG_ENV = frozenset({"TQGC_CONFIG", "TQGC_VENV", "TQGC_EDITABLE"})
REDACTED = "***"
# A URL query parameter whose name holds one of these carries a secret or names key material.
_SECRET_PARAMETER_WORDS = (
    "pass", "secret", "token", "key", "certfile", "ca_certs", "ca_data", "credential", "auth",
)  # fmt: skip
_DURATION_WITH_UNIT = re.compile(r"^\s*\d+(\.\d+)?\s*[a-zA-Z]+\s*$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScopeEntry(_Frozen):
    partition: str = Field(min_length=1)
    prefixes: tuple[str, ...] = ()
    all_keys: bool = False
    # A regular expression the whole key must match (re.fullmatch): for layouts whose transient rows
    # share no prefix with the rows to keep (verl's trajectories `{uid}_{session}_{index}` beside their
    # prompt rows `{uid}`).
    key_pattern: str | None = None

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
        return self


def compile_key_pattern(key_pattern: str) -> re.Pattern[str]:
    """The compiled pattern (re caches it), or ValueError saying why it does not compile."""
    try:
        return re.compile(key_pattern)
    except re.error as exc:
        raise ValueError(f"{key_pattern!r} is not a regular expression ({exc})") from None


class TransferQueueConfig(_Frozen):
    ray_address: str = "auto"
    ray_namespace: str | None = None
    # The most keys (or global indexes) one request asks for; pacing adapts each request's size
    # between a sixteenth of this and this (tq_gc/stores/pacing.py).
    request_batch: int = Field(default=2000, ge=1)
    # A request slower than this halves the next one's size: how long tq-gc may hold the job's
    # controller, which serves one request at a time, in one go.
    request_target_ms: float = Field(default=10.0, gt=0.0, allow_inf_nan=False)
    # The most of the wall time tq-gc's requests may take while it lists and deletes: after a request
    # of t seconds it pauses t * (1 - duty_cycle) / duty_cycle. 1 never pauses.
    duty_cycle: float = Field(default=0.5, gt=0.0, le=1.0, allow_inf_nan=False)


class AdmissionsConfig(_Frozen):
    expect_nonempty: bool = False


class ManifestSource(_Frozen):
    glob: str = Field(min_length=1)
    format: Literal["native", "json", "jsonl", "nemo_rl_recovery"] = "native"
    key_path: str | None = None
    partition: str | None = None
    expect_nonempty: bool = False
    # A larger file fails the source: a runaway or wrong file must not exhaust the sweeper's memory.
    max_file_bytes: int = Field(default=64 * 2**20, gt=0)

    @field_validator("glob")
    @classmethod
    def _absolute_file_pattern(cls, glob: str) -> str:
        if not os.path.isabs(glob):
            raise ValueError(
                f"{glob!r} is relative, so it would be read from whatever directory tq-gc runs in: "
                "use an absolute path, such as /ckpt/**/gc-manifest.json"
            )
        if glob.rsplit("/", 1)[-1] in ("", "**"):
            raise ValueError(
                f"{glob!r} matches directories: end it with a file name pattern, "
                "such as /ckpt/**/gc-manifest.json"
            )
        return glob

    @model_validator(mode="after")
    def _paths_fit_format(self) -> ManifestSource:
        if self.format == "nemo_rl_recovery":
            if self.key_path:
                raise ValueError(
                    "a nemo_rl_recovery inventory names its rows itself (each attempt's staging_keys): "
                    "drop key_path"
                )
            if self.partition is None:
                object.__setattr__(self, "partition", NEMO_RL_STAGING_PARTITION)
        elif self.format == "native":
            if self.key_path or self.partition:
                raise ValueError(
                    "a native (tq-gc/manifest/v1) manifest names its own partitions: "
                    "drop key_path/partition, or set format: json|jsonl"
                )
        elif not (self.key_path and self.partition):
            raise ValueError(f"format {self.format!r} needs both key_path and partition")
        return self


class TagReference(_Frozen):
    partition: str = Field(min_length=1)
    key_path: str = Field(min_length=1)
    target_partition: str = Field(min_length=1)
    # A key path that resolves in none of the partition's rows fails the sweep instead of reading as
    # "references nothing".
    expect_nonempty: bool = False

    @field_validator("key_path")
    @classmethod
    def _well_formed_key_path(cls, key_path: str) -> str:
        split_key_path(key_path)  # a malformed path would abort every sweep later: refuse it now
        return key_path


class OwnerReference(_Frozen):
    """Rows of `partition` referenced while their owner row exists in `owner_partition`.

    The owner's key comes from the row's key (`key_pattern`, whose named groups fill `owner_key`) or
    from one of its tags (`owner_tag`). A row the pattern does not match, or without the tag, is left
    to the other rules."""

    partition: str = Field(min_length=1)
    key_pattern: str | None = None
    owner_key: str | None = None
    owner_tag: str | None = Field(default=None, min_length=1)
    owner_partition: str | None = Field(default=None, min_length=1)
    # A pattern (or tag) that matches no row of a non-empty partition fails the sweep instead of
    # reading as "owns nothing".
    expect_nonempty: bool = False

    @field_validator("key_pattern")
    @classmethod
    def _compiles(cls, key_pattern: str | None) -> str | None:
        if key_pattern is not None:
            compile_key_pattern(key_pattern)
        return key_pattern

    @model_validator(mode="after")
    def _one_way_to_the_owner(self) -> OwnerReference:
        if (self.key_pattern is None) == (self.owner_tag is None):
            raise ValueError(
                f"owner reference for partition {self.partition!r} needs exactly one of `key_pattern` "
                "(with `owner_key`) or `owner_tag`"
            )
        if self.owner_tag is not None:
            if self.owner_key is not None:
                raise ValueError("owner_key: only a key_pattern fills a template; with owner_tag drop it")
        else:
            self._check_owner_key()
        if self.owner_partition is None:
            object.__setattr__(self, "owner_partition", self.partition)
        return self

    def _check_owner_key(self) -> None:
        if self.owner_key is None:
            raise ValueError("owner_key: key_pattern needs a template for the owner's key, such as '{uid}'")
        try:
            template = KeyTemplate.parse(self.owner_key)
        except ValueError as exc:
            raise ValueError(f"owner_key: {exc}") from None
        named = compile_key_pattern(self.key_pattern or "").groupindex
        unknown = [group for group in template.groups if group not in named]
        if unknown:
            raise ValueError(
                f"owner_key: {self.owner_key!r} names {', '.join(map(repr, unknown))}, not a named group "
                f"of key_pattern {self.key_pattern!r} (its groups: {', '.join(named) or 'none'})"
            )
        if not template.groups:
            raise ValueError(
                f"owner_key: {self.owner_key!r} uses no group of key_pattern, so every row would have "
                "the same owner: write a template such as '{uid}'"
            )

    @property
    def owners_in(self) -> str:
        """The partition the owner rows live in (the validator fills in the default)."""
        return self.owner_partition or self.partition


class Limits(_Frozen):
    max_deletes_per_run: int = Field(default=100_000, ge=0)
    max_delete_fraction: float = Field(default=0.5, gt=0.0, le=1.0, allow_inf_nan=False)
    delete_batch: int = Field(default=2000, ge=1)
    max_deletes_per_second: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    # Below this many eligible rows the fraction guard stays quiet: at the end of a run a small
    # staging partition is legitimately all orphans.
    fraction_min_rows: int = Field(default=100, ge=0)


class Schedule(_Frozen):
    interval_seconds: float | None = Field(default=60.0, gt=0.0, allow_inf_nan=False)
    cron: str | None = None
    jitter_seconds: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    misfire_grace_seconds: float = Field(default=30.0, gt=0.0, allow_inf_nan=False)

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


class SidecarConfig(_Frozen):
    name: str = "tq-gc"
    ray_namespace: str = "tq_gc"
    num_cpus: float = Field(default=0.1, ge=0.0, allow_inf_nan=False)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # The sidecar's scheduled sweeps delete (it is how tq-gc runs in production); false makes them dry
    # runs, to watch what it would reclaim (reports, metrics) before letting it.
    execute: bool = True


class Config(_Frozen):
    namespace: str = Field(default="default", pattern=r"^[A-Za-z0-9_.:-]+$")
    state_url: str = "memory://"
    transfer_queue: TransferQueueConfig = TransferQueueConfig()
    scope: tuple[ScopeEntry, ...] = ()
    protected_partitions: tuple[str, ...] = ("rollout_data",)
    allow_unsafe_scope: bool = False
    grace_seconds: float = Field(default=900.0, ge=0.0, allow_inf_nan=False)
    allow_short_grace: bool = False
    lease_ttl_seconds: float = Field(default=60.0, allow_inf_nan=False)
    admissions: AdmissionsConfig = AdmissionsConfig()
    manifests: tuple[ManifestSource, ...] = ()
    tag_references: tuple[TagReference, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()
    limits: Limits = Limits()
    schedule: Schedule = Schedule()
    sidecar: SidecarConfig = SidecarConfig()
    log_format: Literal["text", "json"] = "text"

    @field_validator("grace_seconds", "lease_ttl_seconds", mode="before")
    @classmethod
    def _seconds_are_numbers(cls, value: Any) -> Any:
        if isinstance(value, str) and _DURATION_WITH_UNIT.match(value):
            raise ValueError(f"is in seconds: write a number such as 900, not {value!r}")
        return value

    @field_validator("lease_ttl_seconds")
    @classmethod
    def _lease_ttl_in_bounds(cls, ttl: float) -> float:
        if not MIN_LEASE_TTL_SECONDS <= ttl <= MAX_LEASE_TTL_SECONDS:
            raise ValueError(
                f"{ttl:g} s is outside {MIN_LEASE_TTL_SECONDS:g}..{MAX_LEASE_TTL_SECONDS:g} s: shorter, a "
                "sweep can lose its lease between two renewals; longer, a crashed sweeper blocks the next "
                "one that long. Set a value in that range (the default is 60)"
            )
        return ttl

    @field_validator("state_url")
    @classmethod
    def _known_state_scheme(cls, url: str) -> str:
        scheme = urlsplit(url).scheme
        if scheme not in STATE_SCHEMES:
            raise ValueError(
                f"{redact_url(url)!r} is not a state store URL: use memory://, redis://host:6379/0, "
                "rediss://... or unix:///path/to/redis.sock"
            )
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
        _check_batch_fits_lease(self.limits, self.lease_ttl_seconds)
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
        return data


def _check_batch_fits_lease(limits: Limits, lease_ttl_seconds: float) -> None:
    """A throttled delete batch must end well inside the lease, or the lease runs out mid-batch (and a
    rate near zero sleeps for years, wedging the sidecar's scheduler)."""
    rate = limits.max_deletes_per_second
    if rate == 0:
        return
    batch_seconds = limits.delete_batch / rate
    budget = lease_ttl_seconds / 2
    if batch_seconds < budget:
        return
    fixes = [f"Raise max_deletes_per_second above {limits.delete_batch / budget:.3g}"]
    if rate * budget > 1:
        fixes.append(f"lower delete_batch below {rate * budget:.3g}")
    if 2 * batch_seconds < MAX_LEASE_TTL_SECONDS:
        fixes.append(f"raise lease_ttl_seconds above {2 * batch_seconds:.3g}")
    raise ValueError(
        f"limits.delete_batch={limits.delete_batch} at limits.max_deletes_per_second={rate:g} takes "
        f"{batch_seconds:.3g} s per batch, not under half of lease_ttl_seconds={lease_ttl_seconds:g}: the "
        f"lease could run out mid-batch. {'; or '.join(fixes)} (0 means unthrottled)"
    )


def redact_url(url: str) -> str:
    """`url` with every secret replaced by ***, the rest left readable: the user-info password, the
    value of each query parameter whose name says secret or key material (`?password=` is how
    `unix://` takes one; `ssl_keyfile`, `ssl_password`...), and any fragment (redis-py ignores it, so
    it can only be the tail of a password holding an unescaped '#')."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    user_info, rest = _split_user_info(rest)
    rest, hash_sign, fragment = rest.partition("#")
    path, question_mark, query = rest.partition("?")
    shown = scheme + separator + user_info + path + question_mark + _redact_query(query)
    return shown + hash_sign + (REDACTED if fragment else "")


def _split_user_info(rest: str) -> tuple[str, str]:
    """(user-info shown, the rest). The user-info ends at the last '@' before any query value: a
    password may hold '@' (and a query value may too)."""
    query_start = rest.find("?")
    first_value = rest.find("=", query_start) if query_start >= 0 else -1
    at = rest.rfind("@", 0, first_value if first_value >= 0 else len(rest))
    if at < 0:
        return "", rest
    user_info, rest = rest[:at], rest[at + 1 :]
    if any(char in user_info for char in "/?#"):
        # An unescaped '/', '?' or '#' in the password: no telling the user name from it.
        return f"{REDACTED}@", rest
    user, colon, _password = user_info.partition(":")
    return (f"{user}:{REDACTED}@" if colon else f"{user}@"), rest


def _redact_query(query: str) -> str:
    parameters = []
    for parameter in query.split("&"):
        name, _, value = parameter.partition("=")
        if value and _names_a_secret(unquote_plus(name)):
            parameter = f"{name}={REDACTED}"
        parameters.append(parameter)
    return "&".join(parameters)


def _names_a_secret(parameter_name: str) -> bool:
    lowered = parameter_name.lower()
    return any(word in lowered for word in _SECRET_PARAMETER_WORDS)


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """YAML file, then env TQGC_... (`__` nests), then explicit overrides (flags). Raises ConfigError."""
    data: dict[str, Any] = _read_yaml(Path(path)) if path is not None else {}
    data = _deep_merge(data, env_overrides(os.environ if env is None else env))
    data = _deep_merge(data, dict(overrides or {}))
    return parse_config(data, origin=str(path) if path else "defaults and environment")


ConfigLike = Config | Mapping[str, Any] | str | os.PathLike[str]


def as_config(config: ConfigLike) -> Config:
    """A Config as given, a mapping validated as one, or the YAML file at a path (env applied)."""
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return parse_config(config)
    return load_config(Path(config))


def parse_config(data: Mapping[str, Any], origin: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        details = format_validation_error(exc)
    # Raised outside the handler: the ValidationError (whose text quotes input values, a state_url's
    # password included) must not ride along as the ConfigError's context.
    raise ConfigError(f"invalid config ({origin}):\n{details}")


def format_validation_error(exc: ValidationError) -> str:
    """One line per error, naming the field. Never the input value: it may hold a secret."""
    lines = []
    for error in exc.errors(include_input=False, include_context=False, include_url=False):
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (check its spelling against the README's config reference)"
        elif error["type"] == "finite_number":
            message = "must be a finite number, not .inf or .nan"
        field = ".".join(str(part) for part in error["loc"])
        # A rule across fields (a model validator) has no field of its own: its message names them.
        lines.append(f"  {field}: {message}" if field else f"  {message}")
    return "\n".join(lines)


def env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """TQGC_LIMITS__DELETE_BATCH=100 -> {"limits": {"delete_batch": 100}}; values parse as YAML."""
    result: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name in NOT_CONFIG_ENV:
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        node = result
        for part in path[:-1]:
            node = node.setdefault(part, {})
        try:
            node[path[-1]] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            node[path[-1]] = raw
    return result


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top level")
    return data


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged
