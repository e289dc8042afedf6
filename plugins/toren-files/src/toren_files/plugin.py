"""The plugin module (entry point ``files`` in group ``toren``): registers ``read_document``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import toren
from toren.plugin import ToolError
from toren_files.reader import ReaderLimits, Request, document_kind, read_window

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

#: Bytes of a result kept for the header line around the chunk of text.
HEADER_ROOM = 600
#: Bytes of the header's description of the document (its name, sheets, pages) as JSON.
MAX_DESCRIBED = 300


@toren.tool(idempotent=True)
async def read_document(file_id: str, pages: str | None = None, sheet: str | None = None,
                        cell_range: str | None = None, cursor: int = 0) -> str:
    """Read an uploaded file (PDF, Word docx, Excel xlsx, or text: markdown, CSV, JSON, YAML,
    HTML, logs) as text.

    A long document comes in chunks: the first line says which characters you got and, if
    there is more, the cursor to pass to get the next chunk.

    Args:
        file_id: The file's id (from POST /files or `toren files add`).
        pages: PDF only: pages to read, like "1-3,7" (default: all).
        sheet: Excel only: the sheet's name (default: the first sheet).
        cell_range: Excel only: cells to read, like "A1:D20" (default: the whole sheet).
        cursor: Where to continue: the next_cursor of the previous chunk (0 to start).
    """
    call = toren.current_tool_call()
    if call.read_file is None:
        raise ToolError("this Toren process has no file store to read uploaded files from")
    if cursor < 0:
        raise ToolError(f"cursor={cursor} is outside the text; start from cursor 0")
    limits = ReaderLimits.from_env(os.environ)
    found = await call.read_file(file_id)
    if found is None:
        raise ToolError(f"no file has the id {file_id!r}; upload files with POST /files or "
                        "`toren files add PATH`, and pass the id they return")
    stored, data = found
    kind = document_kind(stored.content_type, stored.name)  # refused here: no reader started
    # the document is parsed in a reader process with its own limits, never in this one
    answer = await read_window(data, Request(
        name=stored.name, kind=kind, cursor=cursor,
        budget=max(64, call.max_output_bytes - HEADER_ROOM), pages=pages, sheet=sheet,
        cell_range=cell_range), limits)
    return render(answer, f"{stored.name} ({stored.content_type}), {answer['label']}")


def render(answer: dict[str, object], described: str) -> str:
    """The reader's window of text after a header saying where it is in the document and where
    the next part starts (``total_characters`` is ``null`` when reading stopped at the window,
    before the end)."""
    end = answer["end"]
    more = bool(answer["more"])
    if len(json.dumps(described, ensure_ascii=False).encode("utf-8")) > MAX_DESCRIBED:
        while len(json.dumps(described, ensure_ascii=False).encode("utf-8")) > MAX_DESCRIBED - 5:
            described = described[:len(described) * 4 // 5]
        described += "..."
    header = {"document": described, "characters": [answer["start"], end],
              "total_characters": answer["total"], "next_cursor": end if more else None}
    follows = (f" (more follows: call read_document again with cursor={end})" if more else "")
    return json.dumps(header, ensure_ascii=False) + follows + "\n" + str(answer["text"])


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(read_document)
