"""YAML documents that remember the line of every key and value, for errors that point at them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from toren.errors import AgentDefinitionError

Path_ = tuple[str | int, ...]

#: Agent definitions are small; these bounds keep a hostile file from hanging the loader.
MAX_CHARS = 1_000_000
#: Values after expanding aliases: a "billion laughs" file is a few lines that expand to 10^9.
MAX_VALUES = 10_000
MAX_DEPTH = 32

_STR_TAG = "tag:yaml.org,2002:str"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TAG_NAMES = {"tag:yaml.org,2002:int": "an integer", "tag:yaml.org,2002:bool": "a boolean",
              "tag:yaml.org,2002:null": "null", _FLOAT_TAG: "a number"}


@dataclass
class LocatedYaml:
    """Parsed data plus 1-based line numbers of each value and each mapping key by path."""

    data: Any
    value_lines: dict[Path_, int] = field(default_factory=dict)
    key_lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_, *, key: bool = False) -> int | None:
        """The line of ``path`` (or of its key), else of its nearest located ancestor."""
        table = self.key_lines if key else self.value_lines
        while path not in table and path:
            path = path[:-1]
        return table.get(path) or self.value_lines.get(path)


def load_located(text: str, *, path: str, line_offset: int = 0) -> LocatedYaml:
    """Parse one YAML document; raise ``AgentDefinitionError`` with file and line on bad YAML.

    The document must be plain data that JSON could hold: duplicate keys (PyYAML would silently
    keep the last one), keys that are not text, ``.nan`` and ``.inf`` are errors, and so are
    documents too large or too deeply nested (after expanding aliases) to be a definition.
    """
    if len(text) > MAX_CHARS:
        raise AgentDefinitionError(
            f"the YAML is {len(text):,} characters long, more than the {MAX_CHARS:,} a "
            "definition may have; keep long text such as prompts in their own files", path=path)
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # its reader rejects control characters right away
        node = loader.get_single_node()
        located = LocatedYaml(None)
        if node is not None:
            # index first: it bounds the expanded size before anything walks the data
            _index(node, (), located, _Walk(path, line_offset))
            located.data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 + line_offset if mark is not None else None
        message = exc.problem or exc.context or "it cannot be parsed"
        if exc.problem and exc.context:  # where the unclosed quote or bracket began
            started = exc.context_mark.line + 1 + line_offset if exc.context_mark else None
            message += f" ({exc.context}{f' at line {started}' if started else ''})"
        if "'\\t'" in message:
            message += "; indent with spaces: YAML does not allow tabs"
        elif isinstance(exc, yaml.constructor.ConstructorError):
            message += "; agent definitions hold plain data: text, numbers, lists and mappings"
        raise AgentDefinitionError(f"invalid YAML: {message}", path=path, line=line) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 + line_offset
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise AgentDefinitionError(f"invalid YAML: the control character U+{code:04X} is not "
                                   "allowed; remove it", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise AgentDefinitionError(f"invalid YAML: {' '.join(str(exc).split())}",
                                   path=path) from None
    finally:
        if loader is not None:
            loader.dispose()
    return located


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader that stops at ``MAX_DEPTH`` levels of nesting (its composer recurses once
    per level: thousands of ``[`` would be a ``RecursionError``, slowly)."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"it is nested more than {MAX_DEPTH} levels deep",
                    self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


@dataclass
class _Walk:
    path: str
    offset: int
    values: int = 0

    def error(self, message: str, node: yaml.Node) -> AgentDefinitionError:
        return AgentDefinitionError(message, path=self.path,
                                    line=node.start_mark.line + 1 + self.offset)


def _index(node: yaml.Node, at: Path_, out: LocatedYaml, walk: _Walk,
           ancestors: tuple[yaml.Node, ...] = ()) -> None:
    if any(node is ancestor for ancestor in ancestors):
        raise walk.error("an alias (*name) refers to a value that contains it; YAML aliases "
                         "must not be recursive", node)
    if len(ancestors) >= MAX_DEPTH:
        raise walk.error(f"it is nested more than {MAX_DEPTH} levels deep once its aliases "
                         "(*name) are expanded", node)
    walk.values += 1
    if walk.values > MAX_VALUES:
        raise walk.error(f"the YAML holds more than {MAX_VALUES:,} values once its aliases "
                         "(*name) are expanded; write the values out instead", node)
    out.value_lines[at] = node.start_mark.line + 1 + walk.offset
    if (isinstance(node, yaml.ScalarNode) and node.tag == _FLOAT_TAG
            and node.value.lower().lstrip("+-") in (".nan", ".inf")):
        raise walk.error(f"{node.value} is not a finite number; use a number such as 1.5", node)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise walk.error("a key is a list or a mapping; keys must be names", key_node)
            key = key_node.value
            if key_node.tag not in (_STR_TAG, _MERGE_TAG):  # "<<: *base" merges a mapping
                kind = _TAG_NAMES.get(key_node.tag, key_node.tag)
                raise walk.error(f"the key {key!r} is read as {kind}, not as a name; quote it "
                                 f"(\"{key}\": ...) or use one of the documented keys", key_node)
            if key in seen:
                raise walk.error(f"key {key!r} appears twice", key_node)
            seen.add(key)
            out.key_lines[(*at, key)] = key_node.start_mark.line + 1 + walk.offset
            _index(value_node, (*at, key), out, walk, (*ancestors, node))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, (*at, index), out, walk, (*ancestors, node))
