"""The server's side of reading a document: one limited reader process per call.

``read_window`` starts ``python -m toren_files.worker`` with the limits, streams the document to
its stdin, reads its answer with a cap, and kills it on the wall clock or when the call is
cancelled; the server's memory never holds more of a document than its bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toren.plugin import DOCX, PDF, XLSX, ToolError, positive_number
from toren_files.extract import DEFAULT_MAX_UNCOMPRESSED, MAX_UNCOMPRESSED_ENV

MEMORY_ENV = "TOREN_FILES_MAX_MEMORY"
CPU_ENV = "TOREN_FILES_MAX_CPU"
TIMEOUT_ENV = "TOREN_FILES_TIMEOUT"
READERS_ENV = "TOREN_FILES_MAX_READERS"
MIB = 1024 * 1024
#: Bytes of the document written to the reader at a time (what the pipe buffers at most).
FEED_BYTES = 64 * 1024
#: Bytes of the reader's stderr kept, to say why it failed.
STDERR_BYTES = 16 * 1024
#: Characters of an error from the reader that reach the model.
MAX_MESSAGE = 1000


@dataclass(frozen=True)
class ReaderLimits:
    """What one reader process may use, from the ``TOREN_FILES_*`` variables."""

    memory_bytes: int = 512 * MIB
    cpu_s: int = 30
    timeout_s: float = 60.0
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
    max_readers: int = 4

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReaderLimits:
        base = cls()
        return cls(
            memory_bytes=positive_number(env, MEMORY_ENV, base.memory_bytes, int),
            cpu_s=positive_number(env, CPU_ENV, base.cpu_s, int),
            timeout_s=positive_number(env, TIMEOUT_ENV, base.timeout_s, float),
            max_uncompressed=positive_number(env, MAX_UNCOMPRESSED_ENV, base.max_uncompressed,
                                             int),
            max_readers=positive_number(env, READERS_ENV, base.max_readers, int))


@dataclass(frozen=True)
class Request:
    """One window of one document's text: what the reader is asked."""

    name: str
    kind: str  # document_kind's answer
    cursor: int
    budget: int
    pages: str | None = None
    sheet: str | None = None
    cell_range: str | None = None


_KINDS = {PDF: "pdf", DOCX: "docx", XLSX: "xlsx", "text/html": "html"}
_TEXT_TYPES = ("application/json", "application/yaml", "application/xml")


def document_kind(content_type: str, name: str) -> str:
    """What the reader parses a file of ``content_type`` as; a ``ToolError`` for a type it
    cannot read (refused before a reader is started)."""
    if content_type in _KINDS:
        return _KINDS[content_type]
    if content_type.startswith("text/") or content_type in _TEXT_TYPES:
        return "text"
    raise ToolError(f"{name} is {content_type}, which read_document cannot read; it reads PDF, "
                    "Word (docx), Excel (xlsx) and text files (markdown, CSV, JSON, YAML, HTML, "
                    "logs)")


#: Reader processes running at once, per event loop (a server process has one).
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


def _reader_slots(count: int) -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    held = _slots.get(loop)
    if held is None or held[0] != count:
        held = _slots[loop] = (count, asyncio.Semaphore(count))
    return held[1]


async def read_window(data: bytes, request: Request, limits: ReaderLimits) -> dict[str, Any]:
    """The reader's answer for ``request`` on ``data``: ``label``, ``text``, ``start``, ``end``,
    ``more`` and ``total`` (``None`` when reading stopped at the window); a ``ToolError`` when
    the document cannot be read or a limit stopped the reader."""
    async with _reader_slots(limits.max_readers):
        returncode, out, err, outcome = await _run_reader(data, request, limits)
    name = request.name
    if outcome == "timeout":
        raise ToolError(f"{name} took longer than {limits.timeout_s:g} s to read "
                        f"({TIMEOUT_ENV}); {_smaller(request)}")
    if outcome == "too_much_output":
        raise ToolError(f"the reader of {name} answered more than was asked for and was "
                        "stopped; this is a bug in toren-files, please report it")
    try:
        answer = json.loads(out) if returncode == 0 else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "error" in answer:
        message = str(answer["error"])
        raise ToolError(message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "...")
    if (isinstance(answer, dict) and answer.get("limit") == "memory") or b"MemoryError" in err:
        raise ToolError(f"{name} needs more than {limits.memory_bytes // MIB} MiB of memory to "
                        f"read ({MEMORY_ENV}); {_smaller(request)}")
    if returncode == -signal.SIGXCPU:  # the kernel's signal past the CPU limit
        raise ToolError(f"{name} needs more than {limits.cpu_s} s of CPU time to read "
                        f"({CPU_ENV}); {_smaller(request)}")
    if returncode == -signal.SIGKILL:  # not ours (a timeout is said above): the OOM killer
        raise ToolError(f"the reader of {name} was killed by the system, most likely for "
                        f"memory; {_smaller(request)}")
    if isinstance(answer, dict) and "text" in answer:
        return answer
    last = err.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no message"]
    raise ToolError(f"the reader of {name} failed (exit status {returncode}: "
                    f"{last[0][:300]}); the file may be damaged")


def _smaller(request: Request) -> str:
    if request.kind == "pdf":
        part = "read fewer pages at a time (pages='1-20')"
    elif request.kind == "xlsx":
        part = "read one sheet, or a cell_range like 'A1:Z500', at a time"
    else:
        part = "ask for a smaller copy of the document"
    return f"{part}, or ask the operator to raise the limit if the file is trusted"


async def _run_reader(data: bytes, request: Request, limits: ReaderLimits
                      ) -> tuple[int | None, bytes, bytes, str]:
    """Run one reader process to its end: its exit status, stdout, stderr, and ``"exited"``,
    ``"timeout"`` or ``"too_much_output"``. A cancelled call kills and reaps it."""
    message = json.dumps({
        "name": request.name, "kind": request.kind, "pages": request.pages,
        "sheet": request.sheet, "cell_range": request.cell_range, "cursor": request.cursor,
        "budget": request.budget, "max_uncompressed": limits.max_uncompressed,
        "memory_bytes": limits.memory_bytes, "cpu_s": limits.cpu_s})
    try:
        process = await asyncio.create_subprocess_exec(
            # -P: the server's working directory is not on the reader's import path
            sys.executable, "-P", "-s", "-m", "toren_files.worker", message,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=_reader_env(), cwd="/",
            start_new_session=True)
    except OSError as exc:
        raise ToolError(f"cannot start the document reader process ({exc})") from None
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    # JSON may spell a character of the text in 6 bytes (\u001f); the label and the numbers
    # fit in the rest
    out_cap = 6 * request.budget + 64 * 1024
    tasks = [asyncio.create_task(_feed(process.stdin, data)),
             asyncio.create_task(_read_capped(process.stdout, out_cap, process)),
             asyncio.create_task(_read_capped(process.stderr, STDERR_BYTES, None))]
    outcome = "exited"
    try:
        async with asyncio.timeout(limits.timeout_s):
            await process.wait()
    except TimeoutError:
        outcome = "timeout"
    finally:
        if process.returncode is None:  # the wall clock, or the tool call was cancelled
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        # the reader is gone, so its pipes are closed: what was read is all there is
        done, pending = await asyncio.wait(tasks, timeout=5)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    _, (out, out_overflow), (err, _) = (
        task.result() if task in done and not task.cancelled() and task.exception() is None
        else (b"", False) for task in tasks)
    if out_overflow:
        outcome = "too_much_output"
    return process.returncode, out, err, outcome


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> tuple[bytes, bool]:
    """Write the document to the reader a slice at a time: the pipe's buffer copies one
    slice, never the whole document."""
    view = memoryview(data)
    try:
        for start in range(0, len(view), FEED_BYTES):
            stdin.write(view[start:start + FEED_BYTES])
            await stdin.drain()
        stdin.close()
        await stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):  # it stopped reading: its answer says why
        pass
    return b"", False


async def _read_capped(stream: asyncio.StreamReader, cap: int,
                       process: asyncio.subprocess.Process | None) -> tuple[bytes, bool]:
    """Up to ``cap`` bytes of the stream, and whether it had more. Past the cap the rest is
    drained (a stderr) or the process is killed (``process`` given: its stdout)."""
    kept = bytearray()
    overflow = False
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        kept += chunk[:room]
        if len(chunk) > room:
            overflow = True
            if process is not None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                break
    return bytes(kept), overflow


def _reader_env() -> dict[str, str]:
    """The reader's environment: none of the server's secrets, only what Python needs."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8",
           "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env
