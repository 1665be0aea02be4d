"""What a user meant by a key the config does not know: the closest field of the section it is in."""

from __future__ import annotations

import difflib
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from tq_gc.config.models import Config

# A field's place in the config, as pydantic gives it: ("scope", 0, "all_keys").
Loc = tuple[str | int, ...]

# How alike a key and a field must be to suggest the field (difflib's ratio).
SIMILARITY_CUTOFF = 0.6


def unknown_key_message(loc: Loc) -> str:
    """What to say of the unknown key at `loc`: the field meant, or the section's fields."""
    key = str(loc[-1]) if loc else ""
    section = _section_at(loc[:-1])
    if section is None:
        return "unknown key (check its spelling against docs/configuration.md)"
    fields = list(section.model_fields)
    meant = difflib.get_close_matches(key, fields, n=1, cutoff=SIMILARITY_CUTOFF)
    if meant:
        return f"unknown key: did you mean {meant[0]!r}? (docs/configuration.md)"
    return f"unknown key: this section has {', '.join(fields)} (docs/configuration.md)"


def _section_at(loc: Loc) -> type[BaseModel] | None:
    """The model of the section at `loc` (list indexes skipped), or None if `loc` names no section."""
    section: type[BaseModel] = Config
    for part in loc:
        if isinstance(part, int):
            continue
        field = section.model_fields.get(part)
        found = None if field is None else _model_in(field.annotation)
        if found is None:
            return None
        section = found
    return section


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through tuple[X, ...] and X | None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (tuple, list, Union, UnionType) or get_args(annotation):
        for argument in get_args(annotation):
            found = _model_in(argument)
            if found is not None:
                return found
    return None
