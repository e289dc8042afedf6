"""Tool sources: tools that an agent.yaml key declares and a plugin discovers while the agent
runs (``mcpServers:``, served by toren-mcp), rather than functions registered at load.

A plugin registers a ``ToolSource`` (hook ``register_tool_sources``) for one top-level key of
agent.yaml. The loader hands it each entry of that key (``bind``, no I/O) and keeps the
``ToolSourceEntry`` it returns on the agent. A worker starts the entries of the agents it
serves (``start``) and stops them on shutdown (``stop``); a task asks its entries for their
tools before it works (``tools``, which may start an entry lazily), so a list that changed
since is what the next model call offers. Each call of a discovered tool goes through the task
loop like any other tool call: recorded before and after, never run again once its result is
recorded, re-run after a crash only if ``SourcedTool.idempotent``, capped by
``limits.maxToolOutputBytes``, subject to ``approvals:`` by name.
"""

from __future__ import annotations

import logging
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toren.errors import ProviderError, ToolError
from toren.seams.tools import TOOL_NAME, Tool

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class SourcedTool:
    """One tool a ``ToolSourceEntry`` offers now: what the model is told, and how to call it.

    ``call`` is awaited with the model's arguments (already checked against ``parameters``)
    while ``toren.plugin.current_tool_call()`` holds the call's context; it returns the
    result (text, anything JSON can hold, or a ``toren.ToolResult`` with files) or raises for
    an error the model reads. A source returns the same object while its tool is unchanged
    (Toren keeps what it builds from each one, such as the arguments' validator, for as long
    as the object lives).
    """

    #: What the model calls it: starts with the entry's ``prefix``; letters, digits, ``_`` and
    #: ``-``, starting with a letter, at most 64 characters.
    name: str
    description: str
    #: JSON Schema (an ``object``) of the arguments.
    parameters: dict[str, Any]
    call: Callable[[dict[str, Any]], Awaitable[Any]] = field(repr=False)
    #: May run again after a crash left its call without a recorded result.
    idempotent: bool = False


class ToolSourceEntry(ABC):
    """One entry of an agent's tool-source key as its source bound it (one MCP server).

    Made by ``ToolSource.bind`` when the agent loads; held by the ``AgentSpec`` (and by each
    subagent that uses it).
    """

    #: The entry's name in agent.yaml (the key under ``mcpServers:``).
    name: str = ""
    #: Every tool the entry offers is named ``prefix`` + something (``time__``): agent.yaml may
    #: name its tools (``approvals:``) before they are discovered.
    prefix: str = ""
    #: Environment variables the entry reads: required at startup, as tools' variables are.
    required_env: tuple[str, ...] = ()

    async def start(self) -> None:
        """Called by a worker as it starts, for each entry of the agents it serves: make
        ready now (start a server, list its tools) rather than at the first task. Raise
        ``ToolError`` naming the agent, the entry and why when it cannot: the worker does not
        start. By default: ``tools()``."""
        await self.tools()

    @abstractmethod
    async def tools(self) -> Sequence[SourcedTool]:
        """The tools the entry offers now. Called by each task of the agent before it works
        (often: answer from what is known). Raise ``ToolError`` naming the agent, the entry and
        why when they cannot be had: the task retries later with backoff (the error shown on
        the run) and fails once the retries are spent."""

    async def stop(self) -> None:
        """Called by a worker on shutdown for each entry ``start`` was called for."""
        return None

    def to_json(self) -> dict[str, Any]:
        """How ``toren agents show`` and ``GET /agents`` describe the entry."""
        return {"name": self.name, "prefix": self.prefix}


class ToolSource(ABC):
    """A plugin's source of tools for one top-level key of agent.yaml (``key``).

    Registered with ``register_tool_sources``; one object per process, shared by every agent.
    The key's shape is checked by agent.schema.json before ``bind`` sees an entry.
    """

    #: The agent.yaml key it reads (``mcpServers``); two sources of one key are an error.
    key: str = ""
    #: One line for ``toren plugins``.
    description: str = ""

    @abstractmethod
    def bind(self, agent: str, name: str, entry: Mapping[str, Any]) -> ToolSourceEntry:
        """One entry of the key for ``agent``, by its ``name``. Called by the agent loader,
        once per entry and per load (the definition may be loaded again): no I/O; raise
        ``ToolError`` with what to change for an entry it cannot use (the loader adds the file
        and line)."""

    async def close(self) -> None:
        """Release whatever the source holds for the process (called at its end)."""
        return None


class ToolSourceUnavailable(ProviderError):
    """A task's tool source (an MCP server) could not offer its tools: the task retries
    later with backoff, then fails."""

    code = "tool_source_unavailable"
    default_reason = "tool_source"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


#: The kernel's ``Tool`` for each ``SourcedTool``, built once while the sourced tool lives.
_TOOLS: weakref.WeakKeyDictionary[SourcedTool, Tool] = weakref.WeakKeyDictionary()


def as_tool(sourced: SourcedTool, entry: ToolSourceEntry, source: str) -> Tool:
    """The ``Tool`` the task loop runs for ``sourced`` (made once per sourced tool)."""
    made = _TOOLS.get(sourced)
    if made is not None:
        return made
    if not TOOL_NAME.match(sourced.name) or not sourced.name.startswith(entry.prefix):
        raise ToolError(f"{source} offered a tool named {sourced.name!r}: a tool of "
                        f"{entry.name!r} must be named {entry.prefix}<name> with letters, "
                        "digits, '_' or '-', at most 64 characters")
    call = sourced.call

    async def function(**arguments: Any) -> Any:
        return await call(arguments)

    function.__name__ = function.__qualname__ = sourced.name
    made = Tool(name=sourced.name, description=sourced.description or sourced.name,
                parameters=sourced.parameters, function=function,
                idempotent=sourced.idempotent, source=source)
    _TOOLS[sourced] = made
    return made


async def source_tools(entries: Iterable[ToolSourceEntry], *, source: str = "tool source"
                       ) -> dict[str, Tool]:
    """The tools ``entries`` offer now, by name; ``ToolError`` from the first that fails."""
    found: dict[str, Tool] = {}
    for entry in entries:
        for sourced in await entry.tools():
            made = as_tool(sourced, entry, f"{source} {entry.name}")
            found.setdefault(made.name, made)
    return found


def entries_json(entries: Iterable[ToolSourceEntry]) -> list[dict[str, Any]]:
    return [entry.to_json() for entry in entries]


async def start_entries(entries: Iterable[ToolSourceEntry]) -> list[ToolSourceEntry]:
    """Start each entry once (a worker, as it starts); the started ones, for ``stop_entries``.
    The first that fails stops the ones started and raises."""
    started: list[ToolSourceEntry] = []
    for entry in dict.fromkeys(entries):
        try:
            await entry.start()
        except BaseException:
            await stop_entries(started)
            raise
        started.append(entry)
    return started


async def stop_entries(entries: Iterable[ToolSourceEntry]) -> None:
    """Stop each entry (a worker, on shutdown); a failure is logged, not raised."""
    for entry in entries:
        try:
            await entry.stop()
        except Exception:
            log.exception("tool source entry %r failed to stop", entry.name)


__all__ = ["SourcedTool", "ToolSource", "ToolSourceEntry", "ToolSourceUnavailable", "as_tool",
           "entries_json", "source_tools", "start_entries", "stop_entries"]
