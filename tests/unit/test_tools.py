"""Tools from plain functions: JSON Schema from the signature, descriptions from the docstring."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import jsonschema
import pytest

from toren import tool
from toren.errors import ToolError
from toren.seams.tools import (
    Tool,
    build_validators,
    parse_docstring,
    tool_from_function,
    type_schema,
)


def search(
    query: str,
    limit: int,
    threshold: float,
    exact: bool,
    tags: list[str],
    filters: dict,
    mode: Literal["fast", "deep"],
    page: Optional[int] = None,  # noqa: UP045 - Optional[...] is one of the spellings under test
    cursor: int | None = None,
    size: int = 10,
    language: str = "en",
) -> str:
    """Search the library.

    Longer explanation that is not part of the summary.

    Args:
        query: What to look for,
            continued on a second line.
        limit (int): At most this many results.
        mode: fast skims titles; deep reads whole documents.

    Returns:
        The matches, one a line.
    """
    return query


def test_schema_maps_each_simple_type() -> None:
    properties = tool_from_function(search).parameters["properties"]

    assert properties["query"]["type"] == "string"
    assert properties["limit"]["type"] == "integer"
    assert properties["threshold"] == {"type": "number"}
    assert properties["exact"] == {"type": "boolean"}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}}
    assert properties["filters"] == {"type": "object"}
    assert properties["mode"]["enum"] == ["fast", "deep"]


def test_optional_and_union_with_none_accept_null() -> None:
    properties = tool_from_function(search).parameters["properties"]

    null_or_int = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert properties["page"] == null_or_int
    assert properties["cursor"] == null_or_int


def test_required_are_the_parameters_without_defaults() -> None:
    schema = tool_from_function(search).parameters

    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query", "limit", "threshold", "exact", "tags", "filters",
                                  "mode"]


def test_defaults_are_in_the_schema_but_none_is_not() -> None:
    properties = tool_from_function(search).parameters["properties"]

    assert properties["size"]["default"] == 10
    assert properties["language"]["default"] == "en"
    assert "default" not in properties["page"]


def test_a_function_with_no_required_parameters_has_no_required_list() -> None:
    def ping(verbose: bool = False) -> str:
        return "pong"

    schema = tool_from_function(ping).parameters
    assert "required" not in schema
    assert schema["properties"] == {"verbose": {"type": "boolean", "default": False}}


def test_generated_schema_is_valid_and_accepts_a_real_call() -> None:
    schema = tool_from_function(search).parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)

    good = {"query": "pg", "limit": 3, "threshold": 0.5, "exact": True, "tags": ["a"],
            "filters": {}, "mode": "deep", "page": None}
    validator.validate(good)
    assert not validator.is_valid({**good, "mode": "slow"})
    assert not validator.is_valid({**good, "unexpected": 1})
    assert not validator.is_valid({key: value for key, value in good.items() if key != "query"})


def test_google_style_docstring_gives_summary_and_argument_descriptions() -> None:
    made = tool_from_function(search)
    properties = made.parameters["properties"]

    assert made.description == "Search the library."
    assert properties["query"]["description"] == (
        "What to look for, continued on a second line.")
    assert properties["limit"]["description"] == "At most this many results."
    assert properties["mode"]["description"] == "fast skims titles; deep reads whole documents."
    assert "description" not in properties["threshold"]


def test_parse_docstring_stops_arguments_at_the_next_section() -> None:
    summary, args = parse_docstring(
        "Do a thing\nin two lines.\n\nBody.\n\nArguments:\n    a: first.\n    b: second\n"
        "        and more.\n\nRaises:\n    ValueError: never an argument.\n")

    assert summary == "Do a thing in two lines."
    assert args == {"a": "first.", "b": "second and more."}


def test_annotated_string_becomes_the_description() -> None:
    assert type_schema(Annotated[str, "the city"]) == {"type": "string",
                                                       "description": "the city"}

    def weather(city: Annotated[str, "The city, e.g. Paris."],
                days: Annotated[int, "How many days ahead."] = 1) -> str:
        """Forecast the weather."""
        return city

    properties = tool_from_function(weather).parameters["properties"]
    # BUG (toren/seams/tools.py, parameters_schema): typing.get_type_hints() is called without
    # include_extras=True, which strips Annotated[...] metadata before type_schema sees it.
    assert properties["city"] == {"type": "string", "description": "The city, e.g. Paris."}
    assert properties["days"] == {"type": "integer", "description": "How many days ahead.",
                                  "default": 1}


def test_unannotated_and_any_parameters_accept_anything() -> None:
    def loose(value, other: Any = None):  # type: ignore[no-untyped-def]
        return value

    assert tool_from_function(loose).parameters["properties"] == {"value": {}, "other": {}}


def test_description_falls_back_to_the_name() -> None:
    def quiet(x: int) -> int:
        return x

    assert tool_from_function(quiet).description == "quiet"


def test_decorator_sets_name_description_and_idempotency() -> None:
    @tool(name="lookup", description="Look it up.", idempotent=True)
    def fetch_entry(key: str) -> str:
        """Not this one."""
        return key

    made = tool_from_function(fetch_entry, source="tests")
    assert (made.name, made.description, made.idempotent, made.source) == (
        "lookup", "Look it up.", True, "tests")
    assert made.spec.name == "lookup"
    assert made.spec.parameters == made.parameters


def test_bare_decorator_keeps_defaults() -> None:
    @tool
    def plain(x: int) -> int:
        """Plain."""
        return x

    made = tool_from_function(plain)
    assert (made.name, made.idempotent) == ("plain", False)
    assert plain(2) == 2  # the decorator returns the function itself


def test_async_functions_are_tools_too() -> None:
    async def fetch(url: str) -> str:
        """Fetch a page."""
        return url

    made = tool_from_function(fetch)
    assert made.parameters["required"] == ["url"]
    assert made.function is fetch


@pytest.mark.parametrize("signature", ["*args: str", "**kwargs: str", "x: int, *rest: int"])
def test_variadic_parameters_are_rejected(signature: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def variadic({signature}) -> None:\n    pass\n", namespace)

    with pytest.raises(ToolError) as info:
        tool_from_function(namespace["variadic"], source="tools.py")
    assert "variadic" in info.value.message
    assert "named parameters" in info.value.message


@pytest.mark.parametrize("name", ["bad name", "9lives", "_private", "dots.not.allowed", "x" * 65,
                                  ""])
def test_invalid_tool_names_are_rejected(name: str) -> None:
    @tool(name=name or None)
    def okay(x: int) -> int:
        return x

    if not name:  # an empty name falls back to the function's own (valid) name
        assert tool_from_function(okay).name == "okay"
        return
    with pytest.raises(ToolError) as info:
        tool_from_function(okay, source="plugin demo")
    assert repr(name) in info.value.message
    assert "plugin demo" in info.value.message


@pytest.mark.parametrize("name", ["a", "web_search", "web-search", "X1", "x" * 64])
def test_valid_tool_names(name: str) -> None:
    @tool(name=name)
    def okay(x: int) -> int:
        return x

    assert tool_from_function(okay).name == name


def test_unresolvable_type_hint_is_a_tool_error() -> None:
    namespace: dict[str, Any] = {}
    exec("def broken(x: 'NoSuchType') -> None:\n    pass\n", namespace)

    with pytest.raises(ToolError) as info:
        tool_from_function(namespace["broken"], source="tools.py")
    assert "broken" in info.value.message
    assert "NoSuchType" in info.value.message


def test_tool_groups_belong_to_one_plugin_and_never_share_a_tool_name() -> None:
    from toren import hookimpl
    from toren.errors import PluginError
    from toren.seams.plugins import PluginHost

    def first(x: str) -> str:
        """One."""
        return x

    def second(x: str) -> str:
        """Two."""
        return x

    class Grouped:
        def __init__(self, group: str, *functions: Any) -> None:
            self.group, self.functions = group, functions

        @hookimpl
        def register_tools(self, register: Any) -> None:
            for function in self.functions:
                register(function, group=self.group)

    host = PluginHost(load=())
    host.add_plugin(Grouped("box", first, second), "box")
    assert {host.tools[n].group for n in ("first", "second")} == {"box"}
    with pytest.raises(PluginError, match="tool group 'box' is registered by two plugins"):
        host.add_plugin(Grouped("box", lambda_like), "other")
    with pytest.raises(PluginError, match="has the name of a tool"):
        host.add_plugin(Grouped("first", lambda_like), "third")


def lambda_like(y: str) -> str:
    """Another tool."""
    return y


def test_validators_are_built_ahead_and_a_broken_schema_is_left_for_its_call() -> None:
    def noop() -> None:
        return None

    good = Tool("good", "Fine.", {"type": "object", "properties": {}}, noop)
    broken = Tool("broken", "Its schema is no schema.", ["not", "a", "schema"], noop)  # type: ignore[arg-type]
    build_validators([broken, good])  # a worker starting: nothing raises
    assert "validator" in vars(good) and good.validator.is_valid({})
    assert "validator" not in vars(broken)
    with pytest.raises(AttributeError):  # its first call fails as it did, and says so there
        broken.validator  # noqa: B018
