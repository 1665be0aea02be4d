"""Configuration: a frozen, validated value, loaded from YAML, then env `TQGC_...`, then flags.

base.py       the frozen value every section is
models.py     Config and its sections, and the safety rules that refuse a config
retired.py    the keys a release renamed or removed, refused with what replaces them
sources.py    the reference sources' sections: manifests, tag references, a scope entry's owner rule
loading.py    YAML + env + flags -> Config, and the error messages that name each field
redaction.py  what is shown of a state store URL's secrets
schedule_fit.py  whether a schedule sweeps often enough to reclaim anything
schema.py, descriptions.py  the config's JSON Schema, every field described
suggest.py    the field an unknown key meant
policy.py     the planner's policy from a config (the pure planner knows nothing of config)
"""

from tq_gc.config.loading import (
    ENV_PREFIX,
    NOT_CONFIG_ENV,
    ConfigLike,
    as_config,
    env_overrides,
    format_validation_error,
    load_config,
    parse_config,
)
from tq_gc.config.models import (
    CANONICAL_PARTITION,
    MIN_GRACE_SECONDS,
    AdmissionsConfig,
    Config,
    Limits,
    Schedule,
    ScopeEntry,
    TransferQueueConfig,
)
from tq_gc.config.policy import max_deletes_clamped, plan_policy
from tq_gc.config.redaction import REDACTED, redact_url
from tq_gc.config.schedule_fit import longest_gap_seconds, schedule_problem
from tq_gc.config.schema import config_schema
from tq_gc.config.sources import (
    NEMO_RL_STAGING_PARTITION,
    ManifestSource,
    Owner,
    OwnerReference,
    TagReference,
    WhenEmpty,
    compile_key_pattern,
)
from tq_gc.state.url import MEMORY_SCHEME, REDIS_SCHEMES, STATE_SCHEMES

__all__ = [
    "CANONICAL_PARTITION",
    "ENV_PREFIX",
    "MEMORY_SCHEME",
    "MIN_GRACE_SECONDS",
    "NEMO_RL_STAGING_PARTITION",
    "NOT_CONFIG_ENV",
    "REDACTED",
    "REDIS_SCHEMES",
    "STATE_SCHEMES",
    "AdmissionsConfig",
    "Config",
    "ConfigLike",
    "Limits",
    "ManifestSource",
    "Owner",
    "OwnerReference",
    "Schedule",
    "ScopeEntry",
    "TagReference",
    "TransferQueueConfig",
    "WhenEmpty",
    "as_config",
    "compile_key_pattern",
    "config_schema",
    "env_overrides",
    "format_validation_error",
    "load_config",
    "longest_gap_seconds",
    "max_deletes_clamped",
    "parse_config",
    "plan_policy",
    "redact_url",
    "schedule_problem",
]
