"""The ``mcp`` entry point: ``toren mcp`` (stdio), ``/mcp`` on the server, and MCP servers'
tools for agents (``mcpServers:`` in agent.yaml)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import toren
from toren.plugin import ToolSource

if TYPE_CHECKING:  # aiohttp loads for a server, not for every command of the CLI
    from aiohttp import web

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
#: 1.1: register_tool_sources (mcpServers:).
#: 1.2: ToolResult, ToolFile (images and PDFs from MCP tools); 1.5: `toren mcp` is a
#: toren.commands entry point (toren_mcp.cli).
TOREN_PLUGIN_API = ">=1.5,<2"


@toren.hookimpl
def register_routes(app: web.Application, runtime: Any) -> None:
    """``POST /mcp`` (called once per server by ``create_app``), behind the API's keys."""
    # imported here: the SDK (pydantic, starlette) loads only for a server, not for every
    # command of the CLI
    from toren_mcp.http import McpEndpoint

    McpEndpoint().install(app)


@toren.hookimpl
def register_tool_sources(register: Callable[[ToolSource], None]) -> None:
    """``mcpServers:`` in agent.yaml: MCP servers' tools (called once when plugins load)."""
    # the SDK itself loads only when a server is started, not for every command of the CLI
    from toren_mcp.client import McpToolSource

    register(McpToolSource())
