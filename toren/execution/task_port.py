"""What the task loop's helper modules need of the task they work for (``TaskRunner``).

Peer calls (``children``), questions (``questions``) and tool waits (``tool_waits``) each
record events, make a tool's error result and flush, sometimes parking the task. They take the
task through this one port, which keeps them from importing the task loop that calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from toren.agents import AgentSpec, Limits
from toren.core import events as ev
from toren.core.fold import TaskState
from toren.core.messages import ToolCall
from toren.core.runs import RunUpdate
from toren.execution.ports import ExecutionPorts
from toren.seams.shapes import Lease, OutgoingMessage


class _Limited(Protocol):
    @property
    def limits(self) -> Limits: ...


class TaskPort(Protocol):
    """A task as its helpers see it: its identity, lease and folded state, the host's ports,
    and three operations (record an event, make a tool's error result, flush)."""

    ports: ExecutionPorts
    agent: AgentSpec
    run_id: str
    task_id: str
    lease: Lease
    state: TaskState
    #: A change to the run's row that goes with the next flush.
    pending_update: RunUpdate | None

    @property
    def spec(self) -> _Limited: ...

    def record(self, event: ev.EventData) -> None: ...

    def tool_error(self, step: int, call: ToolCall, kind: ev.ToolErrorKind,
                   text: str) -> ev.ToolCallCompleted: ...

    async def flush(self, *, messages: Sequence[OutgoingMessage] = (),
                    run_update: RunUpdate | None = None, done: bool = False) -> None: ...
