"""Each manifest format the config accepts is one plugin: a definition (what a source of it needs) and a
reader of that definition, chosen by the format's name."""

from __future__ import annotations

from typing import get_args

import pytest

from tq_gc.config import ManifestSource
from tq_gc.formats.manifest_formats import FORMATS, FormatName
from tq_gc.references.manifests import READERS, reader_of


def test_every_format_the_config_accepts_has_one_definition_and_its_reader() -> None:
    assert tuple(FORMATS) == get_args(FormatName)
    assert tuple(READERS) == get_args(FormatName)
    for name, reader in READERS.items():
        assert reader.definition is FORMATS[name]
        assert reader.definition.name == name


@pytest.mark.parametrize(
    ("fields", "format_name"),
    [
        ({"glob": "/ckpt/**/gc-manifest.json"}, "native"),
        ({"glob": "/ckpt/*.json", "format": "json", "key_path": "keys", "partition": "p"}, "json"),
        ({"glob": "/ckpt/*.jsonl", "format": "jsonl", "key_path": "keys", "partition": "p"}, "jsonl"),
        ({"glob": "/ckpt/**/rollout_recovery.pt", "format": "nemo_rl_recovery"}, "nemo_rl_recovery"),
    ],
)
def test_a_source_is_read_by_the_reader_of_its_format(fields: dict[str, str], format_name: str) -> None:
    assert reader_of(ManifestSource.model_validate(fields)) is READERS[format_name]
