"""Loading a Config: YAML file, then env `TQGC_...` (`__` nests, values parsed as YAML), then flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tq_gc.config.models import Config
from tq_gc.config.retired import retired_keys
from tq_gc.config.suggest import Loc, unknown_key_message
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
    env = os.environ if env is None else env
    data = _deep_merge(data, env_overrides(env))
    data = _deep_merge(data, dict(overrides or {}))
    return parse_config(data, origin=str(path) if path else "defaults", env_names=env_variables(env))


ConfigLike = Config | Mapping[str, Any] | str | os.PathLike[str]


def as_config(config: ConfigLike) -> Config:
    """A Config as given, a mapping validated as one, or the YAML file at a path (env applied)."""
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return parse_config(config)
    return load_config(Path(config))


def parse_config(
    data: Mapping[str, Any], origin: str = "config", env_names: Mapping[Loc, str] | None = None
) -> Config:
    """`env_names`: the TQGC_ variable that set each field (env_variables), named in its error."""
    retired = [_error_line(loc, message, env_names or {}) for loc, message in retired_keys(data)]
    if retired:
        lines, from_env = zip(*retired, strict=True)
        where = "TQGC_ environment variables" if all(from_env) else origin
        raise ConfigError(f"invalid config ({where}):\n" + "\n".join(lines))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        details, from_env_only = format_validation_error(exc, env_names or {})
    # Raised outside the handler: the ValidationError (whose text quotes input values, a state_url's
    # password included) must not ride along as the ConfigError's context.
    where = "TQGC_ environment variables" if from_env_only else origin
    raise ConfigError(f"invalid config ({where}):\n{details}")


def format_validation_error(
    exc: ValidationError, env_names: Mapping[Loc, str] | None = None
) -> tuple[str, bool]:
    """One line per error, naming the field (and the TQGC_ variable that set it), and whether every
    error came from a variable. Never the input value: it may hold a secret."""
    lines = []
    from_env = []
    for error in exc.errors(include_input=False, include_context=False, include_url=False):
        loc = tuple(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = unknown_key_message(loc)
        elif error["type"] == "finite_number":
            message = "must be a finite number, not .inf or .nan"
        line, set_by_env = _error_line(loc, message, env_names or {})
        lines.append(line)
        from_env.append(set_by_env)
    return "\n".join(lines), all(from_env)


def _error_line(loc: Loc, message: str, env_names: Mapping[Loc, str]) -> tuple[str, bool]:
    """The error's line, naming the field (and the TQGC_ variable that set it), and whether one did."""
    variable = _variable_of(loc, env_names)
    if variable is not None:
        message += f" (set by the environment variable {variable})"
    field = ".".join(str(part) for part in loc)
    # A rule across fields (a model validator) has no field of its own: its message names them.
    return (f"  {field}: {message}" if field else f"  {message}"), variable is not None


def _variable_of(loc: Loc, env_names: Mapping[Loc, str]) -> str | None:
    """The variable that set the field at `loc` or one of its parents."""
    path = tuple(part for part in loc if isinstance(part, str))
    return next((env_names[path[:n]] for n in range(len(path), 0, -1) if path[:n] in env_names), None)


def env_variables(env: Mapping[str, str]) -> dict[Loc, str]:
    """Each config variable's field path: TQGC_LIMITS__MAX_DELETES_PER_RUN -> ("limits",
    "max_deletes_per_run")."""
    return {_env_path(name): name for name in env if _is_config_variable(name)}


def _is_config_variable(name: str) -> bool:
    return name.startswith(ENV_PREFIX) and name not in NOT_CONFIG_ENV


def _env_path(name: str) -> tuple[str, ...]:
    return tuple(name[len(ENV_PREFIX) :].lower().split("__"))


def env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """TQGC_LIMITS__MAX_DELETES_PER_RUN=100 -> {"limits": {"max_deletes_per_run": 100}}; values parse as
    YAML."""
    result: dict[str, Any] = {}
    for name, raw in env.items():
        if not _is_config_variable(name):
            continue
        path = _env_path(name)
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
