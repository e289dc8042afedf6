"""The ``mcp`` entry point: ``toren mcp`` (stdio) and ``/mcp`` on the server."""

from __future__ import annotations

from typing import Any

import typer
from aiohttp import web

import toren

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


@toren.hookimpl
def register_commands(app: typer.Typer) -> None:
    """``toren mcp``: MCP on stdio (called once when the CLI starts)."""
    from toren_mcp.cli import mcp

    app.command("mcp")(mcp)


@toren.hookimpl
def register_routes(app: web.Application, runtime: Any) -> None:
    """``POST /mcp`` (called once per server by ``create_app``), behind the API's keys."""
    # imported here: the SDK (pydantic, starlette) loads only for a server, not for every
    # command of the CLI
    from toren_mcp.http import McpEndpoint

    McpEndpoint().install(app)
