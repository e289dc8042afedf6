"""Tools: plain Python functions turned into model-callable tools.

The JSON Schema of a tool's arguments comes from the function's signature (type hints and
defaults) and its description from the docstring (first paragraph, plus Google-style ``Args:``
entries for each parameter).
"""

from __future__ import annotations

import collections.abc
import contextlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, overload

from toren.errors import ToolError
from toren.seams.model import ToolSpec

if TYPE_CHECKING:
    import jsonschema

TOOL_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The attribute ``@tool`` sets on a function, holding its options.
TOOL_MARK = "__toren_tool__"


@dataclass(frozen=True)
class Tool:
    """A tool the task loop can execute.

    ``idempotent`` tools may be re-run after a crash left their call without a recorded result;
    non-idempotent ones are surfaced instead (DESIGN.md, durability rule 4).
    ``source`` says where it came from (a plugin's name or a ``tools.py`` path). ``group`` names
    the set a plugin registered it in (``sandbox``): ``tools: [sandbox]`` in agent.yaml enables
    every tool of the group.
    ``required_env`` are the environment variables the tool reads (``@tool(requires_env=...)``):
    an agent enabling it needs them set at startup, never mid-run. ``env_names`` maps each of
    them to the variable this agent's copy reads instead (``tools: [{name, env}]`` in
    agent.yaml); the tool reads its variables through ``ToolCallContext.getenv``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    idempotent: bool = False
    source: str = ""
    group: str | None = None
    #: Each call waits for a person's approval (``@tool(requires_approval=True)``).
    requires_approval: bool = False
    required_env: tuple[str, ...] = ()
    env_names: Mapping[str, str] = field(default_factory=dict, hash=False)

    def env_var(self, declared: str) -> str:
        """The variable this copy of the tool reads for ``declared`` (renamed or itself)."""
        return self.env_names.get(declared, declared)

    @property
    def env_vars(self) -> tuple[str, ...]:
        """The variables this copy of the tool needs, after any renaming."""
        return tuple(self.env_var(name) for name in self.required_env)

    def with_env_names(self, env_names: Mapping[str, str]) -> Tool:
        """A copy reading renamed variables; ``ToolError`` for a name it does not declare."""
        for declared, actual in env_names.items():
            if declared not in self.required_env:
                raise ToolError(f"tool {self.name!r} reads no variable {declared!r}; it reads "
                                f"{', '.join(self.required_env) or 'none'}")
            if not isinstance(actual, str) or not ENV_NAME.match(actual):
                raise ToolError(f"{actual!r} is not an environment variable name (letters, "
                                "digits and '_', not starting with a digit)")
        return replace(self, env_names=dict(env_names))

    @cached_property
    def spec(self) -> ToolSpec:
        """What the model is told about the tool (built once: every model call sends it)."""
        return ToolSpec(self.name, self.description, self.parameters)

    @cached_property
    def plainly_valid(self) -> Callable[[Any], bool]:
        """Whether arguments certainly match ``parameters``, told without jsonschema for the
        schemas Toren makes from signatures (an object of typed properties); ``False`` means
        "ask ``validator``", never "invalid". jsonschema's walk of even one string argument
        was about 65 Python calls, on every tool call."""
        return plain_arguments_check(self.parameters)

    @cached_property
    def validator(self) -> jsonschema.protocols.Validator:
        """Checks arguments from the model against ``parameters`` (built once: it is hot)."""
        import jsonschema  # ~0.15 s to import: only validation needs it, not every toren command

        cls = jsonschema.validators.validator_for(self.parameters, jsonschema.Draft202012Validator)
        return cls(self.parameters)


@dataclass(frozen=True)
class ToolFile:
    """A file a tool returns for the model to see: an image (PNG, JPEG, GIF, WebP) or a PDF.

    The task loop stores it (once per distinct content, as an upload) and shows it to the
    model with the tool's result when the model takes its kind (``Model.input_types``); a
    model that does not reads a note naming the stored file instead. ``content_type`` must
    be one of those types; ``name`` is what the model and ``GET /files`` see.
    """

    name: str
    content_type: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns when its result has files besides text (an MCP server's image, a
    screenshot): ``return toren.ToolResult("the chart", files=[ToolFile(...)])``.

    Tools that return only text return a ``str`` (or any JSON value) as before.
    ``is_error`` reports a failure back to the model as a raised exception would.
    """

    text: str
    files: tuple[ToolFile, ...] = ()
    is_error: bool = False


#: The Python classes that are each JSON Schema type (exactly: ``bool`` is no ``integer``,
#: and a float with an integral value, which jsonschema counts as one, is left to it).
_PLAIN_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}), "integer": frozenset({int}), "number": frozenset({int, float}),
    "boolean": frozenset({bool}), "null": frozenset({type(None)}), "array": frozenset({list}),
    "object": frozenset({dict}),
}
#: Keywords that annotate a schema without constraining what it accepts.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})


def _plain_classes(schema: Any) -> frozenset[type] | Literal[False] | None:
    """The Python classes a property's schema accepts, ``None`` for any value, ``False`` when
    it says more than a type: ``{}``, ``{"type": T or [T, ...]}``, an object open to any
    properties, or ``anyOf`` of those (``Optional[int]``), with annotations."""
    if not isinstance(schema, dict):
        return False
    keys = set(schema) - _ANNOTATIONS
    if not keys:
        return None  # any value
    if keys == {"anyOf"} and isinstance(schema["anyOf"], list) and schema["anyOf"]:
        options = [_plain_classes(option) for option in schema["anyOf"]]
        if any(option is False for option in options):
            return False
        if any(option is None for option in options):
            return None
        return frozenset().union(*options)  # type: ignore[arg-type]
    extra = schema.get("additionalProperties", True)
    if schema.get("type") == "object" and (extra is True or extra == {}):
        keys -= {"additionalProperties"}  # an object open to anything: as plain "object"
    if keys != {"type"}:
        return False
    kinds = schema["type"]
    names = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(names, list) or not names or any(
            not isinstance(kind, str) or kind not in _PLAIN_TYPES for kind in names):
        return False
    return frozenset().union(*(_PLAIN_TYPES[kind] for kind in names))



def plain_arguments_check(schema: Any) -> Callable[[Any], bool]:
    """``Tool.plainly_valid`` for ``schema``: a check that answers ``True`` only for arguments
    the schema certainly accepts. It reads an object schema whose properties are ``{}`` or
    only a ``type`` (one name or a list) with annotations; anything else, in the schema or
    in the arguments (a float for an ``integer``, a class JSON does not make), answers
    ``False`` and is left to jsonschema."""

    def unsure(arguments: Any) -> bool:
        return False

    if not isinstance(schema, dict) or schema.get("type") != "object" or not set(schema) <= {
            "type", "properties", "required", "additionalProperties", *_ANNOTATIONS}:
        return unsure
    properties: dict[str, frozenset[type] | None] = {}
    declared = schema.get("properties") or {}
    if not isinstance(declared, dict):
        return unsure
    for name, prop in declared.items():
        accepted = _plain_classes(prop)
        if accepted is False:
            return unsure
        properties[name] = accepted
    names_required = schema.get("required") or []
    extra = schema.get("additionalProperties", True)
    if (not isinstance(names_required, list)
            or not all(isinstance(name, str) for name in names_required)
            or (extra is not True and extra is not False)):
        return unsure
    required = frozenset(names_required)
    others_allowed = extra is True

    def check(arguments: Any) -> bool:
        # attribute reads, set and dict operators: no Python call per argument
        if arguments.__class__ is not dict or not required <= arguments.keys():
            return False
        for name, value in arguments.items():
            if name in properties:
                accepted = properties[name]
                if accepted is not None and value.__class__ not in accepted:
                    return False
            elif not others_allowed:
                return False
        return True

    return check


def build_validators(tools: Iterable[Tool]) -> None:
    """Build each tool's ``validator`` now. A worker calls this once as it starts, in a thread:
    the first call of a tool then neither imports jsonschema (~0.15 s, which would stall every
    run on the event loop) nor builds its validator between a model's answer and the tool.
    A schema jsonschema cannot build a validator for is left to fail at its tool's first call,
    where the task reports it, rather than stop the worker from starting."""
    for each in tools:
        with contextlib.suppress(Exception):
            each.plainly_valid  # noqa: B018 (cached properties: read to build them)
            each.validator  # noqa: B018


_Function = TypeVar("_Function", bound=Callable[..., Any])


@overload
def tool(function: _Function, *, name: str | None = None, description: str | None = None,
         idempotent: bool = False, requires_approval: bool = False,
         requires_env: tuple[str, ...] = ()) -> _Function: ...


@overload
def tool(function: None = None, *, name: str | None = None, description: str | None = None,
         idempotent: bool = False, requires_approval: bool = False,
         requires_env: tuple[str, ...] = ()) -> Callable[[_Function], _Function]: ...


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    requires_approval: bool = False,
    requires_env: tuple[str, ...] = (),
) -> Any:
    """Mark a function as a tool and set options: ``@tool`` or ``@tool(idempotent=True)``.

    Undecorated public functions in a crew's ``tools.py`` are tools too; the decorator only adds
    options such as ``idempotent=True``, a different ``name``, ``requires_approval=True``
    (each call waits for a person: see docs/guides/approvals.md; agent.yaml's ``approvals:``
    can name who may approve and when a request expires), or ``requires_env``: the
    environment variables the tool reads (through ``toren.current_tool_call().getenv``), which
    become required at startup for every agent that enables the tool.
    """
    for var in requires_env:
        if not isinstance(var, str) or not ENV_NAME.match(var):
            raise ToolError(f"requires_env: {var!r} is not an environment variable name")

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isfunction(func):
            kind = "class" if isinstance(func, type) else type(func).__name__
            raise ToolError(f"@tool decorates functions (def or async def), not the {kind} "
                            f"{getattr(func, '__qualname__', None) or _short_repr(func)}")
        setattr(func, TOOL_MARK,
                {"name": name, "description": description, "idempotent": idempotent,
                 "requires_approval": requires_approval, "requires_env": tuple(requires_env)})
        return func

    return mark(function) if function is not None else mark


def tool_from_function(function: Callable[..., Any], *, source: str = "",
                       name: str | None = None, group: str | None = None) -> Tool:
    """Build a ``Tool`` from a function's signature, type hints and docstring.

    ``name`` overrides both the function's name and a name given to ``@tool``; ``group`` puts
    it in a named set of tools that agent.yaml can enable at once.
    """
    options = getattr(function, TOOL_MARK, {})
    name = name or options.get("name") or function.__name__
    if not TOOL_NAME.match(name):
        raise ToolError(
            f"tool name {name!r} from {source or function.__module__} is invalid: use letters, "
            "digits, '_' or '-', starting with a letter, at most 64 characters"
        )
    summary, arg_docs = parse_docstring(inspect.getdoc(function) or "")
    description = options.get("description") or summary or name
    return Tool(
        name=name,
        description=description,
        parameters=parameters_schema(function, arg_docs, source=source),
        function=function,
        idempotent=bool(options.get("idempotent")),
        source=source,
        group=group,
        requires_approval=bool(options.get("requires_approval")),
        required_env=tuple(options.get("requires_env", ())),
    )


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its summary and the Google-style ``Args:`` descriptions."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    arg_indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if text.endswith(":") and text[:-1].lower() in _SECTIONS:
            section = "args" if text[:-1].lower() in _ARG_SECTIONS else "other"
            arg_indent, current = None, None
            continue
        if section == "summary":
            if text:
                summary.append(text)
            elif summary:
                section = "body"
        elif section == "args" and text:
            entry = _ARG_ENTRY.match(text)
            if entry and (arg_indent is None or indent <= arg_indent):
                arg_indent, current = indent, entry.group(1)
                args[current] = entry.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {text}".strip()
    return " ".join(summary), args


_ARG_SECTIONS = {"args", "arguments", "parameters"}
_SECTIONS = _ARG_SECTIONS | {"returns", "raises", "yields", "examples", "example", "note"}
_ARG_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parameters_schema(
    function: Callable[..., Any], arg_docs: dict[str, str] | None = None, *, source: str = ""
) -> dict[str, Any]:
    """JSON Schema (an ``object``) for the function's parameters."""
    arg_docs = arg_docs or {}
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:
        raise ToolError(f"cannot read the type hints of tool {function.__name__!r} "
                        f"({source or function.__module__}): {exc}") from exc
    where = f"tool {function.__name__!r} ({source or function.__module__})"
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"{where} takes *{param.name}: tools need named parameters the "
                            "model can fill in")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolError(f"{where} takes {param.name!r} positionally only (before '/'): "
                            "tools are called with keyword arguments; remove the '/'")
        try:
            prop = type_schema(hints.get(param.name, Any))
        except ToolError as exc:
            raise ToolError(f"{where}, parameter {param.name!r}: {exc.message}") from None
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif param.default is not None:
            prop["default"] = param.default
        properties[param.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties,
                              "additionalProperties": False}
    if required:
        schema["required"] = required
    try:  # the schema travels to the model as JSON: defaults and Literal values must fit
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"{where}: a default or Literal value is not JSON ({exc}); use str, "
                        "int, float, bool, None, lists and dicts") from None
    return schema


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:50] + "..."


_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    dict: {"type": "object"},
    list: {"type": "array"},
}


def type_schema(annotation: Any) -> dict[str, Any]:
    """JSON Schema for one type annotation (unannotated or ``Any`` accepts anything).

    Raises ``ToolError`` for a type that JSON arguments cannot be (``Path``, ``datetime``,
    classes): the function would be called with a string or a dict instead.
    """
    if annotation is Any or annotation is object:
        return {}
    if annotation in _SIMPLE:
        return dict(_SIMPLE[annotation])
    if annotation in (tuple, set, frozenset, collections.abc.Sequence):  # items of any type
        return {"type": "array", **({"uniqueItems": True} if annotation in (set, frozenset)
                                    else {})}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is typing.Annotated:
        schema = type_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [type_schema(arg) for arg in args]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is tuple and args and args[-1] is not Ellipsis:
        items = [type_schema(arg) for arg in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items),
                "maxItems": len(items)}
    if origin in (list, tuple, set, frozenset, collections.abc.Sequence):
        array: dict[str, Any] = {"type": "array"}
        if args:
            array["items"] = type_schema(args[0])
        if origin in (set, frozenset):
            array["uniqueItems"] = True
        return array
    if origin in (dict, collections.abc.Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    raise ToolError(f"type {_type_name(annotation)} cannot come from JSON arguments; use str, "
                    "int, float, bool, None, list[...], dict[str, ...], Literal[...] or "
                    "unions of them, and convert in the function")


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__qualname__", None) or repr(annotation)
