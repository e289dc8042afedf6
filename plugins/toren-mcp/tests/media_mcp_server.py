"""An MCP server whose tools answer with images, PDFs and audio (``python media_mcp_server.py``,
over stdio), built with the official ``mcp`` SDK's server.

Tools: ``chart`` (a caption and a real 640x480 PNG, the SDK's ``Image``), ``vector`` (an SVG
image, which Toren cannot show), ``report`` (a PDF as an embedded resource's blob, and a
text resource), ``jingle`` (audio), ``huge_image`` (a PNG of ``megabytes`` MB, padded with
noise so that nothing compresses it), ``broken`` (an error result with a screenshot of the
error).
"""

from __future__ import annotations

import base64
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from toren.testing import pdf_bytes, png_bytes

server = MCPServer(name="media", version="1.0")

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect/></svg>'


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@server.tool()
def chart(title: str) -> CallToolResult:
    """A chart of the quarter, as a PNG."""
    image = Image(data=png_bytes(640, 480, (20, 90, 200)), format="png").to_image_content()
    return CallToolResult(content=[TextContent(type="text", text=f"the chart of {title}"),
                                   image])


@server.tool()
def vector() -> CallToolResult:
    """A logo, as an SVG."""
    return CallToolResult(content=[
        TextContent(type="text", text="the logo"),
        ImageContent(type="image", data=_b64(SVG), mime_type="image/svg+xml")])


@server.tool()
def report() -> CallToolResult:
    """The quarter's report, as a PDF, and its summary as a text resource."""
    pdf = pdf_bytes("Revenue grew 12%.", "Costs fell.")
    return CallToolResult(content=[
        EmbeddedResource(type="resource", resource=BlobResourceContents(
            uri="file:///reports/q3.pdf", mime_type="application/pdf", blob=_b64(pdf))),
        EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="file:///reports/q3.txt", mime_type="text/plain", text="Q3: up 12%."))])


@server.tool()
def jingle() -> Audio:
    """A short sound."""
    return Audio(data=b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28), format="wav")


@server.tool()
def huge_image(megabytes: int) -> CallToolResult:
    """A PNG of megabytes MB."""
    data = png_bytes(64, 64) + os.urandom(megabytes * 1024 * 1024)
    return CallToolResult(content=[
        TextContent(type="text", text="the big picture"),
        ImageContent(type="image", data=_b64(data), mime_type="image/png")])


@server.tool()
def broken() -> CallToolResult:
    """Fails, with a screenshot of the failure."""
    return CallToolResult(is_error=True, content=[
        TextContent(type="text", text="the page did not load"),
        ImageContent(type="image", data=_b64(png_bytes(320, 200)), mime_type="image/png")])


if __name__ == "__main__":
    server.run("stdio")
