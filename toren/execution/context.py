"""What a running tool may know about its call (read with ``toren.current_tool_call()``)."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolCallContext:
    """The call being executed. ``idempotency_key`` is stable across retries and crashes:
    pass it to external systems (payment APIs, e-mail senders) to deduplicate side effects."""

    agent: str
    run_id: str
    task_id: str
    step: int
    call_id: str
    idempotency_key: str


_current: ContextVar[ToolCallContext | None] = ContextVar("toren_tool_call", default=None)


def current_tool_call() -> ToolCallContext:
    """The context of the tool call in progress; ``LookupError`` outside a tool call."""
    context = _current.get()
    if context is None:
        raise LookupError("current_tool_call() is only available while Toren runs a tool")
    return context
