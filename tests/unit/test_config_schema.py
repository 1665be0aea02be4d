"""`tq-gc config schema`: the config's JSON Schema, from the pydantic models, every field described."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tq_gc.cli import EXIT_OK, main
from tq_gc.config import config_schema


def described_fields(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from ((f"Config.{name}", field) for name, field in schema["properties"].items())
    for model, definition in schema.get("$defs", {}).items():
        for name, field in definition.get("properties", {}).items():
            yield f"{model}.{name}", field


def test_every_field_has_a_description() -> None:
    undescribed = [name for name, field in described_fields(config_schema()) if not field.get("description")]
    assert undescribed == []


def test_the_schema_covers_every_section() -> None:
    schema = config_schema()
    assert {"scope", "limits", "schedule", "manifests", "transfer_queue"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_the_command_prints_one_json_document(capsys: Any) -> None:
    assert main(["config", "schema"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(json.dumps(config_schema()))


def test_no_description_names_a_field_that_is_not_there() -> None:
    from tq_gc.config.descriptions import DESCRIPTIONS

    schema = config_schema()
    fields = {f"{model}.{name}" for model, d in schema["$defs"].items() for name in d["properties"]}
    fields |= {f"Config.{name}" for name in schema["properties"]}
    described = {f"{model}.{name}" for model, names in DESCRIPTIONS.items() for name in names}
    assert described - fields == set()
