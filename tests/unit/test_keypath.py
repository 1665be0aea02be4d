from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tq_gc.formats.keypath import extract_keys, split_key_path


@pytest.mark.parametrize(
    ("document", "path", "expected"),
    [
        ({"staging_key": "r1/c1"}, "staging_key", ["r1/c1"]),
        ({"continuation": {"staging_keys": ["a", "b"]}}, "continuation.staging_keys", ["a", "b"]),
        (
            {"continuation": {"staging_keys": [["a"], ["b", ["c"]]]}},
            "continuation.staging_keys",
            ["a", "b", "c"],
        ),
        ({"calls": [{"k": "a"}, {"k": ["b", "c"]}, {}]}, "calls.k", ["a", "b", "c"]),
        ([{"k": "a"}, {"k": "b"}], "k", ["a", "b"]),
        ({"a": [{"b": [{"c": "x"}, {"c": "y"}]}, {"b": []}]}, "a.b.c", ["x", "y"]),
        ({"other": 1}, "continuation.staging_keys", []),
        ({"continuation": None}, "continuation.staging_keys", []),
        ({"continuation": {}}, "continuation.staging_keys", []),
        ({"continuation": {"staging_keys": []}}, "continuation.staging_keys", []),
        ({"continuation": {"staging_keys": None}}, "continuation.staging_keys", []),
        ({"k": "a", "K": "b"}, "k", ["a"]),
    ],
    ids=[
        "string",
        "list",
        "nested-lists-flattened",
        "list-on-the-way",
        "list-at-root",
        "two-lists-on-the-way",
        "missing-segment",
        "null-segment",
        "missing-leaf",
        "empty-list",
        "null-leaf",
        "case-sensitive",
    ],
)
def test_extract_keys(document: Any, path: str, expected: list[str]) -> None:
    assert extract_keys(document, path) == expected


@pytest.mark.parametrize(
    ("document", "path", "message"),
    [
        ({"k": 5}, "k", r"\$\.k is int 5, expected a key"),
        ({"k": {"x": "a"}}, "k", r"\$\.k is an object, expected a key"),
        ({"k": ["a", 5]}, "k", r"\$\.k\[1\] is int"),
        ({"k": ["a", None]}, "k", r"\$\.k\[1\] is null"),
        ({"k": True}, "k", r"is bool"),
        ({"a": "text"}, "a.b", r"\$\.a is str 'text', expected an object holding 'b'"),
        ({"a": [1]}, "a.b", r"\$\.a\[0\] is int 1, expected an object"),
        ("text", "a", r"\$ is str"),
        ({"a": '{"b": "x"}'}, "a.b", r"expected an object holding 'b'"),
    ],
    ids=[
        "number-leaf",
        "object-leaf",
        "number-in-list",
        "null-in-list",
        "bool-leaf",
        "string-on-the-way",
        "number-on-the-way",
        "string-document",
        "json-string-not-decoded-by-default",
    ],
)
def test_extract_keys_refuses_wrong_types(document: Any, path: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        extract_keys(document, path)


@pytest.mark.parametrize(
    ("document", "path", "expected"),
    [
        ({"plan": json.dumps({"keys": ["a", "b"]})}, "plan.keys", ["a", "b"]),
        ({"plan": {"keys": json.dumps(["a", "b"])}}, "plan.keys", ["a", "b"]),
        ({"plan": json.dumps({"keys": json.dumps(["a"])})}, "plan.keys", ["a"]),
        ({"plan": json.dumps([{"keys": "a"}, {"keys": ["b"]}])}, "plan.keys", ["a", "b"]),
        ({"plan": {"keys": "plain/key"}}, "plan.keys", ["plain/key"]),
        ({"plan": json.dumps({})}, "plan.keys", []),
    ],
    ids=["object-string", "array-string-leaf", "doubly-encoded", "array-of-objects-string", "plain", "empty"],
)
def test_extract_keys_decodes_json_strings_when_asked(document: Any, path: str, expected: list[str]) -> None:
    assert extract_keys(document, path, decode_json_strings=True) == expected


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"plan": "{not json"}, r"\$\.plan is a string that is not valid JSON"),
        ({"plan": '"just a string"'}, r"\$\.plan is str 'just a string', expected an object"),
        ({"plan": {"keys": "[broken"}}, r"\$\.plan\.keys is a string that is not valid JSON"),
        ({"plan": {"keys": "[1, 2]"}}, r"\$\.plan\.keys\[0\] is int"),
    ],
    ids=["broken-object", "json-scalar", "broken-array", "array-of-numbers"],
)
def test_extract_keys_refuses_bad_json_strings(document: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        extract_keys(document, "plan.keys", decode_json_strings=True)


@pytest.mark.parametrize("path", ["", ".", "a.", ".a", "a..b"])
def test_empty_segments_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="empty segment"):
        split_key_path(path)
    with pytest.raises(ValueError, match="empty segment"):
        extract_keys({}, path)


# Segment names never contain dots; the filler's names never equal a path segment, so every key found
# must be one that was placed.
_SEGMENT = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
_FILLER_NAME = st.text(alphabet="XYZ", min_size=1, max_size=3)
_SCALAR = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans())
_FILLER = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_FILLER_NAME, inner, max_size=3),
    max_leaves=8,
)
_KEY = st.text(min_size=1, max_size=12).filter(lambda key: not key.lstrip().startswith("["))


@st.composite
def _document_with_keys(draw: st.DrawFn, serialize: bool) -> tuple[Any, str, list[str]]:
    """Random keys placed at a random path in a random document; each step maybe in a list."""
    segments = draw(st.lists(_SEGMENT, min_size=1, max_size=5))
    keys = draw(st.lists(_KEY, max_size=6))
    value: Any = list(keys) if draw(st.booleans()) or len(keys) != 1 else keys[0]
    for segment in reversed(segments):
        node = draw(st.dictionaries(_FILLER_NAME, _FILLER, max_size=3))
        node[segment] = value
        value = [node] if draw(st.booleans()) else node
        if serialize and draw(st.booleans()):
            value = json.dumps(value)  # tags may carry a nested structure serialized
    return value, ".".join(segments), keys


@given(_document_with_keys(serialize=False))
def test_keys_placed_at_a_random_path_are_all_found(case: tuple[Any, str, list[str]]) -> None:
    document, path, keys = case
    assert extract_keys(document, path) == keys
    assert extract_keys(document, path, decode_json_strings=True) == keys


@given(_document_with_keys(serialize=True))
def test_keys_placed_in_serialized_documents_are_all_found(case: tuple[Any, str, list[str]]) -> None:
    document, path, keys = case
    assert extract_keys(document, path, decode_json_strings=True) == keys


def nested_lists(depth: int, innermost: Any = "k") -> Any:
    value = innermost
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("document", "decode"),
    [
        ({"keys": "[" * 100_000}, True),  # a JSON bomb: json.loads itself recurses too deep
        ({"keys": json.dumps(nested_lists(900))}, True),  # decodes, then too deep to walk
        ({"keys": nested_lists(5_000)}, False),  # already decoded (TQ tags are Python objects)
        ({"keys": json.dumps({"keys": nested_lists(900)})}, True),  # deep inside a string on the way
    ],
    ids=["json-bomb", "deep-json-string", "deep-object", "deep-under-a-serialized-object"],
)
def test_a_document_nested_too_deeply_is_refused_as_malformed(document: Any, decode: bool) -> None:
    path = "keys.keys" if isinstance(document["keys"], str) and document["keys"].startswith("{") else "keys"
    with pytest.raises(ValueError, match="nested too deeply"):
        extract_keys(document, path, decode_json_strings=decode)


def test_nesting_within_the_limit_is_flattened() -> None:
    assert extract_keys({"keys": json.dumps(nested_lists(40))}, "keys", decode_json_strings=True) == ["k"]
