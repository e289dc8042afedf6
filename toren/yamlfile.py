"""YAML documents that remember the line of every key and value, for errors that point at them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from toren.errors import AgentDefinitionError

Path_ = tuple[str | int, ...]


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

    Duplicate keys are errors (PyYAML would silently keep the last one).
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 + line_offset if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise AgentDefinitionError(f"invalid YAML: {problem}", path=path, line=line) from None
    located = LocatedYaml(data)
    if node is not None:
        _index(node, (), located, path, line_offset)
    return located


def _index(node: yaml.Node, at: Path_, out: LocatedYaml, path: str, offset: int) -> None:
    out.value_lines[at] = node.start_mark.line + 1 + offset
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise AgentDefinitionError(f"key {key!r} appears twice", path=path,
                                           line=key_node.start_mark.line + 1 + offset)
            seen.add(key)
            out.key_lines[(*at, key)] = key_node.start_mark.line + 1 + offset
            _index(value_node, (*at, key), out, path, offset)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, (*at, index), out, path, offset)
