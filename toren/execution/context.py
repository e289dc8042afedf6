"""What a running tool may know about its call (read with ``toren.current_tool_call()``), and
``wait_for_signal``, with which an async tool parks its task until a signal comes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any

from toren.core.errors import ConfigError, NonDeterminismError, SignalTimeout
from toren.execution.signals import check_signal_name

if TYPE_CHECKING:
    from toren.core.events import ToolWaitEnded
    from toren.files import StoredFile
    from toren.seams.store import ToolStateStore
    from toren.seams.tools import Tool

#: Reads an uploaded file by id: its record and content, or ``None`` if there is none.
ReadFile = Callable[[str], Awaitable["tuple[StoredFile, bytes] | None"]]


@dataclass(frozen=True)
class ToolCallContext:
    """The call being executed. ``idempotency_key`` is stable across retries and crashes:
    pass it to external systems (payment APIs, e-mail senders) to deduplicate side effects.

    ``epoch`` is the task lease's epoch the call runs under (it grows each time another worker,
    or a restarted one, takes the task over). ``state`` is where a tool may keep durable state
    beside the run (``toren.seams.store.ToolStateStore``; ``None`` where the host gives none).
    ``agent_config`` holds the agent.yaml sections that configure plugin tools (``sandbox:``).
    ``max_output_bytes`` is the agent's ``limits.maxToolOutputBytes``: output beyond it is cut,
    so a tool that can page (documents, query results) sizes its pages to fit. ``env_names``
    maps the variables the tool declared (``requires_env``) to the ones this agent set instead.
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
    max_output_bytes: int = 65536
    env_names: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: Reads an uploaded file (``POST /files``, ``toren files add``) by id; ``None`` where
    #: the host has no file store.
    read_file: ReadFile | None = field(default=None, hash=False, compare=False)
    #: The waits of this call that already ended (``ToolWaitEnded``), in order: what its
    #: ``wait_for_signal`` calls return, one each, before a new wait parks the task.
    signal_waits: tuple[ToolWaitEnded, ...] = field(default=(), compare=False, repr=False)
    #: How many ``wait_for_signal`` calls this run of the tool made so far.
    _waits_made: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    def env_var(self, declared: str) -> str:
        """The variable this agent gives the tool for ``declared`` (itself unless renamed)."""
        return self.env_names.get(declared, declared)

    def getenv(self, declared: str) -> str | None:
        """The value of a variable the tool declared, read under this agent's name for it."""
        return os.environ.get(self.env_var(declared)) or None


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


class ToolWaitRequested(BaseException):
    """Raised by ``wait_for_signal`` when the call has no recorded outcome for this wait: the
    task loop records ``ToolWaitStarted`` and parks. A ``BaseException``, so that a tool's
    ``except Exception`` does not swallow it; a tool must let it through."""

    def __init__(self, wait: int, name: str, timeout_s: float | None) -> None:
        super().__init__(f"tool waits for signal {name!r}")
        self.wait = wait
        self.name = name
        self.timeout_s = timeout_s
        #: The run's last signal number when the tool asked (set by the task loop then): the
        #: wait takes the first signal of its name numbered above it.
        self.after = 0


async def wait_for_signal(name: str,
                          timeout: float | None = None) -> Any:  # noqa: ASYNC109
    """Wait, inside an async tool, for the first signal called ``name`` sent to this run after
    the wait began, and return its payload (any JSON value).

    Called by tool code while Toren runs it. The task parks (run status ``waiting``, nothing
    held) until such a signal is sent (``toren jobs signal``, ``POST /runs/{id}/signals/{name}``)
    or, with ``timeout`` (seconds), until it passes: then ``SignalTimeout`` is raised here. The
    tool then runs again **from the top**, with the same arguments and idempotency key, and
    this call returns the recorded payload at once: code before the wait must be safe to
    repeat. A tool may wait several times; each wait is matched by its order in the call.
    Signals are not consumed: every waiting tool (and a workflow's wait) may see the same one.

    Raises ``LookupError`` outside a tool call, ``ConfigError`` for an invalid name or
    timeout, and ``NonDeterminismError`` when the tool, run again, waits for another name at
    the same wait than it recorded.
    """
    context = current_tool_call()
    check_signal_name(name)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not 0 <= timeout < float("inf")):
        raise ConfigError(f"wait_for_signal timeout must be a number of seconds >= 0, not "
                          f"{timeout!r}")
    context._waits_made[0] += 1
    wait = context._waits_made[0]
    if wait > len(context.signal_waits):
        raise ToolWaitRequested(wait, name, None if timeout is None else float(timeout))
    ended = context.signal_waits[wait - 1]
    if ended.name != name:
        raise NonDeterminismError(f"wait {wait} of this tool call waited for the signal "
                                  f"{ended.name!r}, and now waits for {name!r}: a tool that "
                                  "waits must make the same waits in the same order each run")
    if ended.timed_out:
        raise SignalTimeout(f"no signal {name!r} came within {timeout:g} s" if timeout is not None
                            else f"no signal {name!r} came in time",
                            name=name, timeout_s=timeout)
    return ended.payload
