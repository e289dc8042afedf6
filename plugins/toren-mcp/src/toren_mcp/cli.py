"""``toren mcp``: the MCP channel on stdio, for a coding agent that starts it as a subprocess."""

from __future__ import annotations

from toren.plugin.cli import run_async

#: The plugin API versions this module is written for (docs/reference/versioning.md); 1.5:
#: commands declared as toren.commands entry points.
TOREN_PLUGIN_API = ">=1.5,<2"


def mcp() -> None:
    """Serve MCP on stdin/stdout: tools to start, watch and cancel durable runs, talk to
    agents and decide approvals, over the HTTP API at TOREN_URL (default the local `toren dev`)
    with TOREN_API_KEY. See docs/channels/mcp.md."""
    from toren_mcp.server import build_server

    run_async(build_server().run_stdio_async())
