"""Loading a Config: YAML file, then env `TQGC_...` (`__` nests, values parsed as YAML), then flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tq_gc.config.models import Config
from tq_gc.errors import ConfigError

ENV_PREFIX = "TQGC_"

# TQGC_ variables that are not config: the config file's path, and scripts/install.sh's own settings.
NOT_CONFIG_ENV = frozenset({"TQGC_CONFIG", "TQGC_VENV", "TQGC_EDITABLE"})


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
            message = "unknown key (check its spelling against docs/configuration.md)"
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
        problem = yaml_error_place(exc)
    else:
        return _top_mapping(path, data)
    # Raised outside the handler: the YAMLError quotes the offending line, which may hold a password.
    raise ConfigError(f"config file {str(path)!r} is not valid YAML: {problem}")


def _top_mapping(path: Path, data: object) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top level")
    return data


def yaml_error_place(exc: yaml.YAMLError) -> str:
    """What PyYAML found wrong and where (line, column), without the snippet of the line it quotes: that
    line may be `state_url: redis://:password@...`."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__
    parts = [
        f"{text} ({_place(mark)})" if mark is not None else text
        for text, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark))
        if text
    ]
    return "; ".join(parts) or "malformed"


def _place(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged
