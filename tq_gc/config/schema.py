"""The config's JSON Schema, from the pydantic models, each field with its description."""

from __future__ import annotations

from typing import Any

from tq_gc.config.descriptions import DESCRIPTIONS
from tq_gc.config.models import Config


def config_schema() -> dict[str, Any]:
    """Config's JSON Schema (draft 2020-12), every property described (descriptions.py)."""
    schema = Config.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["description"] = "tq-gc's config (docs/configuration.md)."
    _describe(schema, DESCRIPTIONS["Config"])
    for model, definition in schema.get("$defs", {}).items():
        _describe(definition, DESCRIPTIONS.get(model, {}))
    return schema


def _describe(definition: dict[str, Any], descriptions: Any) -> None:
    for name, field in definition.get("properties", {}).items():
        if name in descriptions:
            field["description"] = descriptions[name]
