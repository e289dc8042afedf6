"""The sandbox's tools: ``bash``, ``read_file``, ``write_file`` and ``edit_file``.

Each runs on the workspace of the task calling it (``toren.current_tool_call()``), restored from
the store first when this worker does not hold it current, and recorded after it when it may
have changed it. They are registered as idempotent: a call a crash interrupted before its result
was recorded runs again, on the workspace as it was before that call. The file tools do their
file work in a thread: a slow disk, or a large file, must not stall the worker's event loop.
``read_file`` shows the model an image or a PDF (``toren.ToolResult``) rather than its bytes.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path, PurePosixPath

from toren import current_tool_call, tool
from toren.plugin import PDF_TYPE, ToolError, ToolFile, ToolResult
from toren_sandbox import files, media
from toren_sandbox.config import SandboxConfig, sandbox_uid
from toren_sandbox.jail import run_isolated
from toren_sandbox.workspace import Workspaces

#: Whether commands are isolated (``False`` only in the explicit unsafe mode); set at
#: registration by ``toren_sandbox.plugin``.
ISOLATED = True
WORKSPACES = Workspaces()


def _owner() -> int | None:
    """The uid commands run as when it is not the worker's own (the worker is root)."""
    return sandbox_uid() if os.geteuid() == 0 and ISOLATED else None


def _config() -> SandboxConfig:
    return SandboxConfig.from_agent(current_tool_call().agent_config)


@tool(idempotent=True)
async def bash(command: str) -> str:
    """Run a bash command in your workspace (/workspace, also the current directory).

    The workspace is the only place you can write, and it is kept: files stay there between
    calls. There is no network unless the agent allows it. Output is cut when too long.

    Args:
        command: the bash command line, e.g. "python3 script.py > out.txt && cat out.txt".
    """
    context = current_tool_call()
    config = _config()
    WORKSPACES.owner = _owner()
    notes: list[str] = []
    async with WORKSPACES.open(context, config, mutating=True, notes=notes) as directory:
        result = await run_isolated(command, directory, config, os.environ, uid=WORKSPACES.owner,
                                    isolate=ISOLATED)
    if ISOLATED and result.exit_code == 1 and result.stderr.startswith(b"bwrap: "):
        # bwrap itself failed (namespaces refused by the kernel or a container's seccomp
        # profile): the command never ran, and the model cannot fix that
        raise ToolError(f"the sandbox could not start on this worker: "
                        f"{result.stderr.decode(errors='replace').strip()}; see "
                        "docs/tools/sandbox.md (user namespaces must be allowed)")
    return "\n".join([result.render(config.timeout_s), *notes])


@tool(idempotent=True)
async def read_file(path: str, offset: int = 1, limit: int = 2000) -> str | ToolResult:
    """Read a text file of your workspace, with line numbers; an image (PNG, JPEG, GIF, WebP)
    or a PDF is shown to you instead, e.g. a screenshot you made.

    Args:
        path: relative to the workspace (or under /workspace).
        offset: the first line to show (1 is the first line of the file).
        limit: how many lines to show at most.
    """
    if offset < 1 or limit < 1:
        raise ToolError("offset and limit must be at least 1")
    context = current_tool_call()
    config = _config()
    async with WORKSPACES.open(context, config, mutating=False) as directory:
        return await asyncio.to_thread(_read, directory, path, offset, limit)


def _read(directory: Path, path: str, offset: int, limit: int) -> str | ToolResult:
    """The file as ``read_file`` gives it: an image or a PDF as a file for the model (the task
    loop stores it and shows it, or says why not), anything else as numbered lines."""
    data = files.read_bytes(directory, path)
    shown = media.shown_as(data)
    if shown is None:
        return _read_lines(data, path, offset, limit)
    content_type, shape = shown
    kind = "PDF" if content_type == PDF_TYPE else "image"
    name = PurePosixPath(path).name
    return ToolResult(f"{kind} {path} ({f'{shape}, ' if shape else ''}{content_type}), "
                      f"{len(data):,} bytes: attached to this result",
                      files=(ToolFile(name, content_type, data),))


def _read_lines(data: bytes, path: str, offset: int, limit: int) -> str:
    lines = data.decode("utf-8", "replace").splitlines()
    shown = lines[offset - 1:offset - 1 + limit]
    body = "\n".join(f"{offset + index:6}\t{line}" for index, line in enumerate(shown))
    rest = len(lines) - (offset - 1 + len(shown))
    if rest > 0:
        body += f"\n[... {rest} more lines: read on with offset={offset + len(shown)}]"
    return body if lines else f"{path} is empty"


@tool(idempotent=True)
async def write_file(path: str, content: str) -> str:
    """Create or replace a file of your workspace with the given text (directories are made).

    Args:
        path: relative to the workspace (or under /workspace).
        content: the whole new content of the file.
    """
    context = current_tool_call()
    config = _config()
    WORKSPACES.owner = _owner()
    data = content.encode()
    async with WORKSPACES.open(context, config, mutating=True) as directory:
        created = await asyncio.to_thread(files.write_bytes, directory, path, data,
                                          owner=WORKSPACES.owner)
    return f"{'created' if created else 'replaced'} {path} ({len(data)} bytes)"


@tool(idempotent=True)
async def edit_file(path: str, old_text: str, new_text: str, replace_all: bool = False) -> str:
    """Replace exact text in a file of your workspace.

    Args:
        path: relative to the workspace (or under /workspace).
        old_text: the text to find, exactly as it is in the file (include enough context to
            make it unique).
        new_text: what to put in its place.
        replace_all: replace every occurrence instead of requiring exactly one.
    """
    if not old_text:
        raise ToolError("old_text is empty: give the exact text to replace "
                        "(use write_file to write a whole file)")
    context = current_tool_call()
    config = _config()
    WORKSPACES.owner = _owner()
    async with WORKSPACES.open(context, config, mutating=True) as directory:
        count = await asyncio.to_thread(_replace, directory, path, old_text, new_text,
                                        replace_all, WORKSPACES.owner)
    return f"edited {path}: {count if replace_all else 1} replacement(s)"


def _replace(directory: Path, path: str, old_text: str, new_text: str, replace_all: bool,
             owner: int | None) -> int:
    """Replace ``old_text`` in the file (see ``edit_file``); how many times it occurred."""
    try:
        text = files.read_bytes(directory, path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{path} is not UTF-8 text (byte {exc.start}); edit_file edits text "
                        "files: use write_file or bash for this one") from None
    count = text.count(old_text)
    if count == 0:
        raise ToolError(f"old_text was not found in {path}; read the file and copy the "
                        "text exactly, whitespace included")
    if count > 1 and not replace_all:
        raise ToolError(f"old_text occurs {count} times in {path}: include more context "
                        "to make it unique, or set replace_all")
    files.write_bytes(directory, path, text.replace(old_text, new_text).encode(), owner=owner)
    return count
