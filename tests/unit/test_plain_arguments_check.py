"""Tool.plainly_valid: says "valid" only where jsonschema would, without jsonschema."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toren.seams.tools import parameters_schema, plain_arguments_check


def search(query: str, limit: int = 5, ratio: float = 0.5, exact: bool = False,
           tags: list | None = None, extra: dict[str, Any] | None = None,
           note: Annotated[str, "a note"] = "", anything: Any = None) -> str:
    """Search.

    Args:
        query: what to look for.
    """
    return query


def pick(mode: Literal["a", "b"], count: int | None = None, names: list[str] | None = None
         ) -> str:
    return mode


SCHEMAS = [
    parameters_schema(search),
    parameters_schema(pick),  # an enum and items: left to jsonschema
    {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}, "required": ["n"]},
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 0}}},  # unsure
    {"type": "object", "additionalProperties": {"type": "string"}},  # unsure
    {"type": "object"},
    {"type": "array"},  # unsure
    {"type": "object", "properties": {"x": {"type": [{"bad": 1}]}}},  # unsure, no error
]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=3),
    max_leaves=6)
ARGUMENTS = st.dictionaries(
    st.sampled_from(["query", "limit", "ratio", "exact", "tags", "extra", "note", "anything",
                     "mode", "count", "n", "x", "other"]), JSON_VALUES, max_size=5)


@settings(max_examples=400, deadline=None)
@given(arguments=ARGUMENTS | JSON_VALUES, index=st.integers(0, len(SCHEMAS) - 1))
def test_plainly_valid_only_where_jsonschema_agrees(arguments: Any, index: int) -> None:
    schema = SCHEMAS[index]
    if plain_arguments_check(schema)(arguments):
        validator = jsonschema.validators.validator_for(schema)(schema)
        assert validator.is_valid(arguments), (schema, arguments)


@pytest.mark.parametrize("arguments", [
    {"query": "go"},
    {"query": "go", "limit": 3, "ratio": 1, "exact": True, "tags": ["a"], "extra": {"k": 1},
     "note": "", "anything": [1, {"x": None}]},
    {"query": "go", "tags": None, "extra": None, "ratio": 2.5},
])
def test_a_signature_schema_is_read_without_jsonschema(arguments: dict[str, Any]) -> None:
    assert plain_arguments_check(parameters_schema(search))(arguments)


@pytest.mark.parametrize("arguments", [
    {},  # query is required
    {"query": 1},
    {"query": "go", "limit": True},  # a bool is no integer
    {"query": "go", "limit": 2.0},  # jsonschema's to judge (it takes it)
    {"query": "go", "unknown": 1},  # additionalProperties: false
    ["go"],
])
def test_anything_else_is_left_to_jsonschema(arguments: Any) -> None:
    assert not plain_arguments_check(parameters_schema(search))(arguments)
