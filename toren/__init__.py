"""Toren: a self-hosted durable agent runtime on a Postgres event log."""

from typing import TYPE_CHECKING

from toren.lazy_names import lazy_getattr
from toren.version import __version__

if TYPE_CHECKING:
    from toren.execution.context import ToolCallContext, current_tool_call, wait_for_signal
    from toren.host.runtime import Runtime
    from toren.seams.hookspecs import hookimpl
    from toren.seams.tools import ToolFile, ToolResult, tool


__all__ = ["Runtime", "ToolCallContext", "ToolFile", "ToolResult", "__version__",
           "current_tool_call", "hookimpl", "tool", "wait_for_signal"]

#: Where each name lives, imported at its first use: ``import toren.core.events`` (or any
#: ``toren.`` module) runs this file first, and should not pay for the tool decorator's
#: modules and asyncio, nor the host API for the drivers and the database layer (a tools.py
#: that only needs ``toren.tool`` should not pay for that either).
_WHERE = {"ToolCallContext": "toren.execution.context",
          "current_tool_call": "toren.execution.context",
          "wait_for_signal": "toren.execution.context",
          "hookimpl": "toren.seams.hookspecs",
          "ToolFile": "toren.seams.tools", "ToolResult": "toren.seams.tools",
          "tool": "toren.seams.tools",
          "Runtime": "toren.host.runtime"}


__getattr__ = lazy_getattr(globals(), _WHERE, "toren")
