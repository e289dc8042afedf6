"""Toren: a self-hosted durable agent runtime on a Postgres event log."""

from typing import TYPE_CHECKING, Any

from toren.execution.context import ToolCallContext, current_tool_call, wait_for_signal
from toren.seams.hookspecs import hookimpl
from toren.seams.tools import ToolFile, ToolResult, tool
from toren.version import __version__

if TYPE_CHECKING:
    from toren.host.runtime import Runtime


__all__ = ["Runtime", "ToolCallContext", "ToolFile", "ToolResult", "__version__",
           "current_tool_call", "hookimpl", "tool", "wait_for_signal"]


def __getattr__(name: str) -> Any:
    # The host API pulls in drivers and the database layer; tools.py files that only need
    # ``toren.tool`` should not pay for that at import.
    if name == "Runtime":
        from toren.host.runtime import Runtime

        return Runtime
    raise AttributeError(f"module 'toren' has no attribute {name!r}")
