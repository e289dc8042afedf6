"""A fake MCP server for the failure modes (``python fake_mcp_server.py``, over stdio), built
with the ``mcp`` SDK's server.

Tools: ``record`` (appends its text to the file ``FAKE_MCP_LOG``: a count of calls that lives
outside every process), ``secret`` (the value of ``FAKE_SECRET`` it was started with), ``fail``
(an error result), ``crash`` (the process exits mid-call), ``hang`` (never answers),
``malformed`` (answers with a result that is not a ``CallToolResult``), ``huge`` (``size``
characters), ``add_tool`` (adds a tool and says the list changed), ``structured`` (structured
content only). ``FAKE_MCP_FAIL_START=1`` makes it exit at start, after a line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

if os.environ.get("FAKE_MCP_FAIL_START") == "1":
    print("fake server: cannot open its database /nonexistent/fake.db", file=sys.stderr)
    sys.exit(2)

#: The wire, kept before the SDK diverts file descriptor 1 (stray prints go to stderr then).
WIRE = os.dup(1)
server = MCPServer(name="fake", version="1.0")


@server.tool()
def record(text: str) -> str:
    """Append text to the call log and say so."""
    with open(os.environ["FAKE_MCP_LOG"], "a", encoding="utf-8") as log:
        log.write(text + "\n")
    return f"recorded {text}"


@server.tool()
def secret() -> str:
    """The secret the server was started with."""
    return os.environ.get("FAKE_SECRET", "(none)")


@server.tool()
def fail(reason: str = "no reason") -> str:
    """Always fails."""
    raise ToolError(f"the fake refused: {reason}")


@server.tool()
def crash() -> str:
    """The process exits in the middle of the call."""
    print("fake server: crashing on purpose mid-call", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "too late"


@server.tool()
async def malformed(ctx: Context) -> str:
    """Answers with a result that is not a CallToolResult, then waits."""
    request_id = ctx.request_id
    answer = {"jsonrpc": "2.0",
              "id": int(request_id) if str(request_id).isdigit() else request_id,
              "result": {"content": "not a list of blocks", "isError": "maybe"}}
    os.write(WIRE, (json.dumps(answer) + "\n").encode())
    await asyncio.sleep(3600)
    return "too late"


@server.tool()
def huge(size: int) -> str:
    """size characters of text."""
    return "x" * size


@server.tool()
def structured() -> dict[str, int]:
    """Structured content."""
    return {"answer": 42}


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool named name (it answers with its name) and say the list changed."""

    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"The tool {name}, added at run time.")
    await ctx.notify_tools_changed()
    with __import__("contextlib").suppress(Exception):
        await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
