"""The planner's policy from a config: the pure core (tq_gc.plan) knows nothing of config."""

from __future__ import annotations

from tq_gc.config.models import Config
from tq_gc.plan import PlanPolicy


def plan_policy(config: Config, max_deletes: int | None = None) -> PlanPolicy:
    """What a sweep of `config` may plan: its scope and grace, and at most `max_deletes` deletes
    (--max-deletes), never more than limits.max_deletes_per_run."""
    limits = config.limits
    cap = limits.max_deletes_per_run
    return PlanPolicy(
        scope=config.scope,
        grace_ms=int(config.grace_seconds * 1000),
        max_deletes=cap if max_deletes is None else min(max_deletes, cap),
        max_delete_fraction=limits.max_delete_fraction,
        fraction_min_rows=limits.fraction_min_rows,
    )


def max_deletes_clamped(config: Config, max_deletes: int | None) -> str | None:
    """What to say when --max-deletes asks for more than limits.max_deletes_per_run allows, or None."""
    cap = config.limits.max_deletes_per_run
    if max_deletes is None or max_deletes <= cap:
        return None
    return (
        f"--max-deletes {max_deletes} is above limits.max_deletes_per_run={cap}: this sweep deletes at "
        f"most {cap} rows. Raise limits.max_deletes_per_run to allow more"
    )
