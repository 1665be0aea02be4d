"""Owner key templates: `{uid}` or `{run}/{uid}`, filled from a key pattern's named groups.

A template is literal text and `{group}` fields (`{{` and `}}` are literal braces). A field is a bare
group name: no positional `{}`, no attribute or index (`{uid.x}`, `{uid[0]}`), no conversion or format
spec, so what the owner key is can be read off the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from string import Formatter


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """A parsed template: (literal text, group name or None) pieces, in order."""

    pieces: tuple[tuple[str, str | None], ...]

    @classmethod
    def parse(cls, template: str) -> KeyTemplate:
        """Raises ValueError naming what is wrong with `template`."""
        try:
            parsed = list(Formatter().parse(template))
        except ValueError as exc:  # a single '{' or '}'
            raise ValueError(
                f"{template!r} is not a key template ({exc}); write {{{{ for a literal brace"
            ) from None
        pieces: list[tuple[str, str | None]] = []
        for literal, field, spec, conversion in parsed:
            if field is not None and (not field.isidentifier() or spec or conversion):
                shown = (
                    "{"
                    + field
                    + (f"!{conversion}" if conversion else "")
                    + (f":{spec}" if spec else "")
                    + "}"
                )
                raise ValueError(
                    f"field {shown} of {template!r} is not a group name: write {{name}}, where name is a "
                    "named group (?P<name>...) of key_pattern"
                )
            pieces.append((literal, field))
        return cls(tuple(pieces))

    @property
    def groups(self) -> tuple[str, ...]:
        """The group names the template uses, in order of first use."""
        return tuple(dict.fromkeys(field for _, field in self.pieces if field is not None))

    def render(self, groups: Mapping[str, str | None]) -> str | None:
        """The owner key, or None when a group the template uses did not take part in the match."""
        parts: list[str] = []
        for literal, field in self.pieces:
            parts.append(literal)
            if field is not None:
                value = groups[field]
                if value is None:
                    return None
                parts.append(value)
        return "".join(parts)
