"""Configuration: a frozen, validated value. Loaded from YAML, then env `TQGC_...`, then flags.

Every refusal here enforces a safety rule of DESIGN.md and says which field is wrong and what to do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tq_gc.errors import ConfigError

MIN_GRACE_SECONDS = 60.0
STATE_SCHEMES = ("memory", "redis", "rediss", "unix")
ENV_PREFIX = "TQGC_"
_DURATION_WITH_UNIT = re.compile(r"^\s*\d+(\.\d+)?\s*[a-zA-Z]+\s*$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScopeEntry(_Frozen):
    partition: str = Field(min_length=1)
    prefixes: tuple[str, ...] = ()
    all_keys: bool = False

    @field_validator("prefixes")
    @classmethod
    def _no_catch_all_prefix(cls, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        for prefix in prefixes:
            if prefix in ("", "*"):
                raise ValueError(
                    f"prefix {prefix!r} would match every key; write `all_keys: true` to mean that"
                )
        return prefixes

    @model_validator(mode="after")
    def _prefixes_xor_all_keys(self) -> ScopeEntry:
        if self.all_keys == bool(self.prefixes):
            raise ValueError(
                f"scope entry for partition {self.partition!r} needs either non-empty `prefixes` "
                "or `all_keys: true`, not both"
            )
        return self

    def covers(self, key: str) -> bool:
        return self.all_keys or key.startswith(self.prefixes)


class TransferQueueConfig(_Frozen):
    ray_address: str = "auto"
    ray_namespace: str | None = None
    request_batch: int = Field(default=2000, ge=1)


class AdmissionsConfig(_Frozen):
    expect_nonempty: bool = False


class ManifestSource(_Frozen):
    glob: str = Field(min_length=1)
    format: Literal["native", "json", "jsonl"] = "native"
    key_path: str | None = None
    partition: str | None = None
    expect_nonempty: bool = False

    @model_validator(mode="after")
    def _paths_fit_format(self) -> ManifestSource:
        if self.format == "native":
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


class Limits(_Frozen):
    max_deletes_per_run: int = Field(default=100_000, ge=0)
    max_delete_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    delete_batch: int = Field(default=2000, ge=1)
    max_deletes_per_second: float = Field(default=0.0, ge=0.0)
    # Below this many eligible rows the fraction guard stays quiet: at the end of a run a small
    # staging partition is legitimately all orphans.
    fraction_min_rows: int = Field(default=100, ge=0)


class Schedule(_Frozen):
    interval_seconds: float | None = Field(default=60.0, gt=0.0)
    cron: str | None = None
    jitter_seconds: float = Field(default=0.0, ge=0.0)
    misfire_grace_seconds: float = Field(default=30.0, gt=0.0)

    @model_validator(mode="after")
    def _one_trigger(self) -> Schedule:
        if self.cron is not None:
            if len(self.cron.split()) != 5:
                raise ValueError(f"cron {self.cron!r} must have 5 fields, like '*/5 * * * *'")
            object.__setattr__(self, "interval_seconds", None)
        elif self.interval_seconds is None:
            raise ValueError("set either interval_seconds or cron")
        return self


class SidecarConfig(_Frozen):
    name: str = "tq-gc"
    ray_namespace: str = "tq_gc"
    num_cpus: float = Field(default=0.1, ge=0.0)
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
    grace_seconds: float = Field(default=900.0, ge=0.0)
    allow_short_grace: bool = False
    lease_ttl_seconds: float = Field(default=60.0, gt=0.0)
    admissions: AdmissionsConfig = AdmissionsConfig()
    manifests: tuple[ManifestSource, ...] = ()
    tag_references: tuple[TagReference, ...] = ()
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
            for entry in self.scope:
                if entry.partition in self.protected_partitions:
                    raise ValueError(
                        f"scope: partition {entry.partition!r} is protected (protected_partitions): "
                        "the trainer treats any change there as fatal. Remove it from scope, or set "
                        "allow_unsafe_scope: true if you really mean it"
                    )
        partitions = [entry.partition for entry in self.scope]
        if len(partitions) != len(set(partitions)):
            raise ValueError("scope: each partition may appear once; merge the entries' prefixes")
        return self

    def scope_for(self, partition: str) -> ScopeEntry | None:
        return next((entry for entry in self.scope if entry.partition == partition), None)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "state_url" else value

    def redacted(self) -> dict[str, Any]:
        """The config as a log-safe dict (no password)."""
        data = self.model_dump(mode="json")
        data["state_url"] = redact_url(self.state_url)
        return data


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


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


def parse_config(data: Mapping[str, Any], origin: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid config ({origin}):\n{format_validation_error(exc)}") from None


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (check its spelling against the README's config reference)"
        lines.append(f"  {field}: {message}")
    return "\n".join(lines)


def env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """TQGC_LIMITS__DELETE_BATCH=100 -> {"limits": {"delete_batch": 100}}; values parse as YAML."""
    result: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name == "TQGC_CONFIG":
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
