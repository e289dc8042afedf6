"""Test helpers for Toren and for plugin authors (also a ``pytest11`` plugin: its fixtures are
available in any pytest run where toren is installed).

- ``ScriptedModel`` / ``ScriptedProvider``: the offline model, with a per-call ``delay``, a call
  counter (``calls``, and ``call_log`` for a counter outside the process) and an optional script.
- ``scripted_model`` fixture: a fresh ``ScriptedModel``.
- ``make_agent_dir`` fixture: writes an agent directory from a few keyword arguments.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toren.default_plugins.scripted import ScriptedModel, ScriptedProvider, respond_with_tools

__all__ = ["ScriptedModel", "ScriptedProvider", "respond_with_tools", "write_agent_dir"]


def write_agent_dir(
    parent: Path,
    name: str = "test-agent",
    *,
    agent_yaml: str | None = None,
    prompt: str | None = "You are a test agent.\n",
    tools_py: str | None = None,
    subagents: dict[str, str] | None = None,
    **yaml_fields: Any,
) -> Path:
    """Create ``parent/name`` holding an agent definition; return its path.

    ``agent_yaml`` is written verbatim when given; otherwise a minimal one is made from
    ``yaml_fields`` (``model`` defaults to ``toren/scripted``). ``prompt=None`` omits prompt.md.
    """
    import yaml

    directory = parent / name
    directory.mkdir(parents=True, exist_ok=True)
    if agent_yaml is None:
        fields = {"model": "toren/scripted", **yaml_fields}
        agent_yaml = yaml.safe_dump(fields, sort_keys=False)
    (directory / "agent.yaml").write_text(textwrap.dedent(agent_yaml))
    if prompt is not None:
        (directory / "prompt.md").write_text(prompt)
    if tools_py is not None:
        (directory / "tools.py").write_text(textwrap.dedent(tools_py))
    for sub_name, text in (subagents or {}).items():
        (directory / "subagents").mkdir(exist_ok=True)
        (directory / "subagents" / f"{sub_name}.md").write_text(textwrap.dedent(text))
    return directory


@pytest.fixture
def scripted_model() -> ScriptedModel:
    """A fresh offline model; inspect ``.calls`` after the code under test ran."""
    return ScriptedModel()


@pytest.fixture
def make_agent_dir(tmp_path: Path) -> Callable[..., Path]:
    """``make_agent_dir(name, **fields)`` -> a new agent directory under ``tmp_path``."""

    def make(name: str = "test-agent", **kwargs: Any) -> Path:
        return write_agent_dir(tmp_path, name, **kwargs)

    return make
