"""Dotted key paths into JSON-like documents: where a manifest record or a row's tags name row keys.

`continuation.staging_keys` walks dicts by name; a list met on the way applies the rest of the path to
each element; the value at the end is a key or a list of keys (nested lists are flattened).

A missing segment, or an explicit null, references nothing: a record without a continuation holds no
rows. Anything else of the wrong shape raises ValueError, because a malformed manifest read as empty
would release every row it protects. So does a document nested deeper than MAX_NESTING lists and objects
along the path (a JSON bomb such as `[[[[...`, or a tag built that way): it fails its source cleanly
instead of exhausting the interpreter's recursion limit in the middle of a sweep.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Far deeper than any manifest record or tag tq-gc reads (a few objects and lists), far shallower than the
# interpreter's recursion limit (1,000 frames, shared with the sweep's own).
MAX_NESTING = 100


def split_key_path(dotted_path: str) -> tuple[str, ...]:
    """`a.b.c` -> ("a", "b", "c"). Raises ValueError on an empty path or an empty segment."""
    segments = tuple(dotted_path.split("."))
    if not all(segments):
        raise ValueError(f"key path {dotted_path!r} has an empty segment: write names joined by single dots")
    return segments


def extract_keys(document: Any, dotted_path: str, *, decode_json_strings: bool = False) -> list[str]:
    """Every key at `dotted_path` in `document`, in document order.

    With `decode_json_strings`, a string met where the path needs an object, or where keys are expected
    and it holds a JSON array, is decoded first: row tags often carry nested structures serialized.
    Raises ValueError, naming the place, when a value has the wrong type.
    """
    keys: list[str] = []
    _walk(document, split_key_path(dotted_path), decode_json_strings, "$", keys, 0)
    return keys


def _walk(
    value: Any, segments: tuple[str, ...], decode: bool, where: str, keys: list[str], depth: int
) -> None:
    if depth > MAX_NESTING:
        raise ValueError(f"{_short(where)} is nested too deeply (more than {MAX_NESTING} lists and objects)")
    if decode and isinstance(value, str) and (segments or value.lstrip().startswith("[")):
        value = _decode(value, where)
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _walk(item, segments, decode, f"{where}[{index}]", keys, depth + 1)
    elif not segments:
        if not isinstance(value, str):
            raise ValueError(f"{where} is {_describe(value)}, expected a key (string) or a list of keys")
        keys.append(value)
    elif isinstance(value, Mapping):
        child = value.get(segments[0])
        if child is not None:
            _walk(child, segments[1:], decode, f"{where}.{segments[0]}", keys, depth + 1)
    else:
        raise ValueError(f"{where} is {_describe(value)}, expected an object holding {segments[0]!r}")


def _decode(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is a string that is not valid JSON ({exc.msg})") from None
    except RecursionError:  # json.loads recurses once per level: '[' * 100000
        raise ValueError(f"{_short(where)} is a string holding JSON nested too deeply to decode") from None


def _short(where: str) -> str:
    """A place deep in a document, shortened: `$.keys[0][0]...[0]` a thousand times says nothing more."""
    return where if len(where) <= 80 else f"{where[:60]}...{where[-16:]}"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "an object"
    return f"{type(value).__name__} {value!r:.40}"
