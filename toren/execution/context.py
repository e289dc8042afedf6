"""What a running tool may know about its call (read with ``toren.current_tool_call()``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren.seams.store import ToolStateStore
    from toren.seams.tools import Tool


@dataclass(frozen=True)
class ToolCallContext:
    """The call being executed. ``idempotency_key`` is stable across retries and crashes:
    pass it to external systems (payment APIs, e-mail senders) to deduplicate side effects.

    ``epoch`` is the task lease's epoch the call runs under (it grows each time another worker,
    or a restarted one, takes the task over). ``state`` is where a tool may keep durable state
    beside the run (``toren.seams.store.ToolStateStore``; ``None`` where the host gives none).
    ``agent_config`` holds the agent.yaml sections that configure plugin tools (``sandbox:``).
    """

    agent: str
    run_id: str
    task_id: str
    step: int
    call_id: str
    idempotency_key: str
    epoch: int = 0
    state: ToolStateStore | None = field(default=None, compare=False, repr=False)
    agent_config: Mapping[str, Any] = field(default_factory=dict, compare=False)


_current: ContextVar[ToolCallContext | None] = ContextVar("toren_tool_call", default=None)


@dataclass(frozen=True)
class RunningAsyncTool:
    """An async tool being awaited on the event loop (what a blocked loop may be stuck in)."""

    name: str
    code: CodeType | None
    context: ToolCallContext


#: Async tools in progress, by the asyncio task awaiting them; read by the event-loop watchdog
#: (``toren.host.watchdog``) from its own thread to say which tool blocked the loop.
RUNNING_ASYNC_TOOLS: dict[int, RunningAsyncTool] = {}


@contextmanager
def running_async_tool(tool: Tool, context: ToolCallContext) -> Iterator[None]:
    """Register an async tool call for the watchdog while it is awaited."""
    key = id(asyncio.current_task())
    RUNNING_ASYNC_TOOLS[key] = RunningAsyncTool(
        tool.name, getattr(tool.function, "__code__", None), context)
    try:
        yield
    finally:
        RUNNING_ASYNC_TOOLS.pop(key, None)


def current_tool_call() -> ToolCallContext:
    """The context of the tool call in progress; ``LookupError`` outside a tool call."""
    context = _current.get()
    if context is None:
        raise LookupError("current_tool_call() is only available while Toren runs a tool")
    return context
