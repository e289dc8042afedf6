"""The plugin module (entry point ``files`` in group ``toren``): registers ``read_document``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import toren
from toren.errors import ToolError
from toren_files.extract import extract_text

#: Bytes of a result kept for the header line around the chunk of text.
HEADER_ROOM = 600


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
    found = await call.read_file(file_id)
    if found is None:
        raise ToolError(f"no file has the id {file_id!r}; upload files with POST /files or "
                        "`toren files add PATH`, and pass the id they return")
    stored, data = found
    text, part = await asyncio.to_thread(extract_text, data, stored.content_type, stored.name,
                                         pages=pages, sheet=sheet, cell_range=cell_range)
    return chunk(text, cursor, call.max_output_bytes - HEADER_ROOM,
                 f"{stored.name} ({stored.content_type}), {part}")


def chunk(text: str, cursor: int, budget: int, described: str) -> str:
    """The part of ``text`` from ``cursor`` that fits ``budget`` UTF-8 bytes, after a header
    saying where it is and where the next part starts."""
    if not 0 <= cursor <= len(text):
        raise ToolError(f"cursor={cursor} is outside the text, which has {len(text)} "
                        "characters; start again from cursor 0")
    budget = max(64, budget)
    piece = text[cursor:cursor + budget]
    while len(piece.encode("utf-8")) > budget:  # multi-byte characters: cut by bytes
        excess = len(piece.encode("utf-8")) - budget
        piece = piece[:len(piece) - max(1, excess // 4)]
    end = cursor + len(piece)
    header = {"document": described, "characters": [cursor, end], "total_characters": len(text),
              "next_cursor": end if end < len(text) else None}
    more = (f" (more follows: call read_document again with cursor={end})"
            if end < len(text) else "")
    return json.dumps(header, ensure_ascii=False) + more + "\n" + piece


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(read_document)
