"""What the commands share: their common options, the duty cycle's type, and loading the config (the
URLs it names join the secrets every output hides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from tq_gc.config import Config, load_config
from tq_gc.logs import configure_logging
from tq_gc.wiring import duty_cycle_problem

# The URLs this run was given (config, flags): their secrets are hidden in everything it prints.
secret_urls: list[str] = []


def config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config",
        "config_path",
        envvar="TQGC_CONFIG",
        type=click.Path(dir_okay=False),
        help="YAML config file (env TQGC_CONFIG). Env TQGC_... overrides it; flags override both.",
    )(func)


def json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.")(func)


def wide_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--wide",
        is_flag=True,
        help="Tables as wide as their rows on a terminal too (piped, they always are).",
    )(func)


class DutyCycle(click.ParamType[float, Any]):
    """A duty cycle: a number above 0 and at most 1 (a usage error otherwise, naming the range)."""

    name = "F"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            duty = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number: a duty cycle is above 0 and at most 1", param, ctx)
        problem = duty_cycle_problem(duty)
        if problem is not None:
            self.fail(problem, param, ctx)
        return duty


def load(ctx: click.Context, config_path: str | None, **overrides: Any) -> Config:
    """The config (YAML, env, flags); logging configured as the command line says."""
    config = load_config(config_path, overrides={k: v for k, v in overrides.items() if v is not None})
    secret_urls.extend(config.secret_urls())
    configure_logging(ctx.meta.get("log_level", "INFO"), ctx.meta.get("log_format", "text"), secret_urls)
    return config


__all__ = ["DutyCycle", "config_option", "json_option", "load", "secret_urls", "wide_option"]
