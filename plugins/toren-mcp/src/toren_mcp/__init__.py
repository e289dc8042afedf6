"""toren-mcp, the MCP channel: drive durable runs from a coding agent (Claude Code, Cursor)
over the Model Context Protocol. ``toren mcp`` serves it on stdio; ``toren serve`` and
``toren dev`` serve it at ``/mcp`` (streamable HTTP); ``toren_mcp.plugin`` adds both. Every
tool goes through the HTTP API (``toren.client``), so an MCP client sees and may do exactly
what an HTTP client with the same key may. See docs/channels/mcp.md."""
