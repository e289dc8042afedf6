"""MCP servers as tools: the ``mcpServers:`` tool source (docs/tools/mcp-servers.md).

``McpToolSource`` binds each ``mcpServers:`` entry of an agent to an ``McpServerEntry``; the
entries of one process that describe the same server (same command, arguments and
environment, or same URL and headers) share one ``McpConnection``: one MCP session per worker
process per server, started by the worker (or by the first task that needs it), reused across
runs, started again after it broke (with backoff), closed on shutdown. Its tool list is kept
until the server says it changed (``notifications/tools/list_changed``, or a change event on
a 2026 connection).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import fnmatch
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO, Any
from urllib.parse import urlparse

import toren
from toren.plugin import (
    PDF_TYPE,
    SourcedTool,
    ToolError,
    ToolFile,
    ToolResult,
    ToolSource,
    ToolSourceEntry,
    current_tool_call,
)

log = logging.getLogger(__name__)

KEY = "mcpServers"
#: ``${NAME}``: the worker's environment variable NAME, in env and header values.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")
#: A resource's own file name, kept for the file it brings when it is this plain.
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_TOOL_NAME = 64
#: How much of a server's stderr an error quotes.
STDERR_TAIL_CHARS = 1500
#: Waits between attempts to start a server that failed: doubling from the first, capped.
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 30.0
#: The idempotency key of each call, in the request's ``_meta`` (servers may deduplicate).
IDEMPOTENCY_META = "dev.toren/idempotencyKey"


@dataclass(frozen=True)
class ServerConfig:
    """One ``mcpServers:`` entry, checked."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    #: Variable -> value template (``${VAR}`` read from the worker's environment at start).
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    idempotent: bool | frozenset[str] = False
    timeout_s: float = 60.0
    start_timeout_s: float = 30.0

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def required_env(self) -> tuple[str, ...]:
        names: list[str] = []
        for _key, value in (*self.env, *self.headers):
            names += [name for name in REFERENCE.findall(value) if name not in names]
        return tuple(names)

    @property
    def connection_key(self) -> tuple[Any, ...]:
        """What makes two entries one server: how it is reached, not how it is filtered."""
        return (self.command, self.args, self.env, self.cwd, self.url, self.headers)

    def offers(self, tool: str) -> bool:
        if self.allow and not any(fnmatch.fnmatchcase(tool, p) for p in self.allow):
            return False
        return not any(fnmatch.fnmatchcase(tool, p) for p in self.deny)

    def is_idempotent(self, tool: str) -> bool:
        if isinstance(self.idempotent, bool):
            return self.idempotent
        return tool in self.idempotent


def parse_entry(name: str, entry: Mapping[str, Any]) -> ServerConfig:
    """A checked ``ServerConfig``; ``ToolError`` saying what to change (the schema has checked
    types and keys already)."""
    command, url = entry.get("command"), entry.get("url")
    if bool(command) == bool(url):
        raise ToolError("give either command (a server started over stdio) or url (one "
                        "reached over streamable HTTP), not both")
    if url and any(key in entry for key in ("args", "env", "cwd")):
        raise ToolError("args, env and cwd are for a server started with command; a server at "
                        "a url takes headers")
    if command and "headers" in entry:
        raise ToolError("headers are for a server at a url; a server started with command "
                        "takes env")
    raw_env = entry.get("env") or {}
    env = (tuple((var, f"${{{var}}}") for var in raw_env) if isinstance(raw_env, list)
           else tuple(sorted(raw_env.items())))
    headers = tuple(sorted((entry.get("headers") or {}).items()))
    for where, pairs in (("env", env), ("headers", headers)):
        for key, value in pairs:
            rest = REFERENCE.sub("", value)
            if "${" in rest:
                raise ToolError(f"{where}.{key}: {value!r} has a '${{' that is not a reference "
                                "${NAME} to an environment variable (letters, digits, '_')")
    idempotent = entry.get("idempotent", False)
    return ServerConfig(
        name=name, command=command, args=tuple(str(a) for a in entry.get("args", ())),
        env=env, cwd=entry.get("cwd"), url=url, headers=headers,
        allow=tuple(entry.get("allow", ())), deny=tuple(entry.get("deny", ())),
        idempotent=idempotent if isinstance(idempotent, bool) else frozenset(idempotent),
        timeout_s=float(entry.get("timeoutSeconds", 60.0)),
        start_timeout_s=float(entry.get("startTimeoutSeconds", 30.0)))


def _expand(template: str) -> str:
    return REFERENCE.sub(lambda match: os.environ.get(match.group(1), ""), template)


def tool_names(prefix: str, tools: Sequence[str]) -> dict[str, str]:
    """The name the model sees for each MCP tool: ``prefix`` + the tool's name, characters
    other than letters, digits, ``_`` and ``-`` made ``_``; a name that would pass 64
    characters, or that another tool already took, ends with ``_`` and 8 hex digits of the
    tool's name's hash instead (docs/tools/mcp-servers.md)."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for tool in tools:
        name = prefix + SAFE_NAME.sub("_", tool)
        if len(name) > MAX_TOOL_NAME or name in taken:
            digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
            name = name[:MAX_TOOL_NAME - 9] + "_" + digest
        taken.add(name)
        names[tool] = name
    return names


#: The types of file Toren shows a model (``toren.plugin.SHOWABLE_TYPES``), with the extension
#: a file an MCP tool returned is named with.
EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif",
              "image/webp": ".webp", PDF_TYPE: ".pdf"}
#: Names servers give a showable type besides its own.
TYPE_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}
CANNOT_SHOW = "Toren shows a model PNG, JPEG, GIF and WebP images and PDFs"


def result_content(result: Any, tool: str) -> tuple[str, tuple[ToolFile, ...]]:
    """What the model reads of the ``CallToolResult`` of ``tool``, and the files it is shown.

    Text blocks are the text; an image, or an embedded resource's blob, of a type Toren shows
    (PNG, JPEG, GIF, WebP, PDF) becomes a file named ``<tool>-<n>.<ext>`` (a resource's own
    name when its URI ends in one) with a line in the text where it was; other images, audio
    and blobs a note saying what was dropped and why. The structured content is the text
    when there is nothing else. A result with text only reads exactly as its text blocks.
    """
    parts: list[str] = []
    files: list[ToolFile] = []

    def attach(kind: str, content_type: str, data: str, uri: str | None = None) -> str:
        content_type = TYPE_ALIASES.get(content_type, content_type)
        size = len(data) * 3 // 4
        extension = EXTENSIONS.get(content_type)
        if extension is None:
            return f"[{kind} {content_type}, about {size:,} bytes, not shown: {CANNOT_SHOW}]"
        try:
            content = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return f"[{kind} {content_type}, not shown: its data is not base64]"
        named = PurePosixPath(urlparse(uri).path).name if uri else ""
        if not SAFE_FILE_NAME.fullmatch(named) or not named.lower().endswith(
                (extension, ".jpeg") if extension == ".jpg" else extension):
            named = f"{SAFE_NAME.sub('_', tool)}-{len(files) + 1}{extension}"
        files.append(ToolFile(named, content_type, content))
        return f"[{kind}: {named} ({content_type}, {len(content):,} bytes)]"

    for block in result.content:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            parts.append(attach("image", block.mime_type, block.data))
        elif kind == "audio":
            size = len(block.data) * 3 // 4
            parts.append(f"[audio {block.mime_type}, about {size:,} bytes, not shown: "
                         f"{CANNOT_SHOW}, not audio]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            blob = getattr(resource, "blob", None)
            if text is not None:
                parts.append(text)
            elif blob is not None:
                parts.append(attach(f"resource {resource.uri}",
                                    resource.mime_type or "application/octet-stream", blob,
                                    str(resource.uri)))
            else:
                parts.append(f"[resource {resource.uri} ({resource.mime_type or 'binary'})]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}: {block.name}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), tuple(files)


class McpConnection:
    """One MCP session with one server, shared by the entries that describe it.

    A task of its own holds the session (the SDK's transports must be entered and left by
    one task) from ``ensure`` until ``close``; when the session breaks, the next ``ensure``
    starts it again after a backoff that doubles with each failure in a row.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.client: Any = None
        self.tools: list[Any] = []
        #: Grows each time the tool list is read again (``McpServerEntry`` rebuilds then).
        self.generation = 0
        self.stale = False
        self.users = 0
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._stderr: IO[str] | None = None

    @property
    def label(self) -> str:
        config = self.config
        return (f"{config.command} {' '.join(config.args)}".strip() if config.command
                else str(config.url))

    async def ensure(self) -> Any:
        """The live session, started (or started again) if need be; ``ToolError`` with the
        reason and the server's stderr tail when it cannot be."""
        if self.client is not None and self._holder is not None and not self._holder.done():
            if self.stale:
                await self._refresh()
            return self.client
        async with self._lock:
            if self.client is not None and self._holder is not None and not self._holder.done():
                return self.client
            now = time.monotonic()
            if now < self._retry_at:
                raise ToolError(f"{self._last_error} (next attempt in "
                                f"{self._retry_at - now:.1f} s)")
            try:
                await self._start()
            except ToolError as exc:
                self._failures += 1
                delay = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** (self._failures - 1))
                self._retry_at = time.monotonic() + delay
                self._last_error = exc.message
                raise
            self._failures = 0
            return self.client

    async def _start(self) -> None:
        from mcp.client import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        config = self.config
        _whole_line_reads()
        await self._discard()
        if self._stderr is not None:  # the last attempt's: its tail was told already
            self._stderr.close()
        self._stderr = await asyncio.to_thread(
            tempfile.TemporaryFile, "w+", encoding="utf-8", errors="replace")
        target: Any
        if config.command:
            # a transport rather than the parameters: the server's stderr goes to the file
            target = stdio_client(StdioServerParameters(
                command=config.command, args=list(config.args), cwd=config.cwd,
                env={key: _expand(value) for key, value in config.env}), errlog=self._stderr)
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(
                headers={key: _expand(value) for key, value in config.headers},
                timeout=httpx2.Timeout(30.0, read=max(300.0, config.timeout_s)))
            target = _HttpTransport(streamable_http_client(str(config.url), http_client=http),
                                    http)
        client = Client(target, cache=None, message_handler=self._on_message,
                        client_info=_client_info())
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        self._stop = stop
        self._holder = asyncio.create_task(self._hold(client, ready, stop),
                                           name=f"toren-mcp-{config.name}")
        try:
            async with asyncio.timeout(config.start_timeout_s):
                await asyncio.shield(ready)
        except TimeoutError:
            await self._discard()
            raise ToolError(f"MCP server {config.name!r} ({self.label}) did not start within "
                            f"{config.start_timeout_s:g} s (startTimeoutSeconds)"
                            f"{await self.stderr_tail()}") from None
        except BaseException as exc:
            await self._discard()
            if isinstance(exc, ToolError):
                raise
            if not isinstance(exc, Exception):
                raise
            raise ToolError(f"MCP server {config.name!r} ({self.label}) could not start: "
                            f"{_describe(exc)}{await self.stderr_tail()}") from exc

    async def _hold(self, client: Any, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        try:
            async with client:
                self.client = client
                await self._list_tools()
                if not ready.done():
                    ready.set_result(None)
                await self._serve(client, stop)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else
                                    RuntimeError(f"stopped: {type(exc).__name__}"))
            elif not stop.is_set() and isinstance(exc, Exception):
                log.warning("MCP server %s stopped: %s", self.config.name, _describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.client = None

    async def _serve(self, client: Any, stop: asyncio.Event) -> None:
        """Wait for ``stop``; meanwhile, on a 2026 connection whose server announces tool list
        changes, listen for them (a handshake-era server sends them as notifications)."""
        capabilities = client.server_capabilities
        announces = bool(capabilities.tools and capabilities.tools.list_changed)
        if not announces or not _modern(client.protocol_version):
            await stop.wait()
            return

        async def listen() -> None:
            with contextlib.suppress(Exception):
                async with client.listen(tools_list_changed=True) as subscription:
                    async for _event in subscription:
                        self.stale = True

        listener = asyncio.create_task(listen())
        try:
            await stop.wait()
        finally:
            listener.cancel()
            with contextlib.suppress(BaseException):
                await listener

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.stale = True

    async def _list_tools(self) -> None:
        listed: list[Any] = []
        cursor: str | None = None
        for _page in range(100):  # a paginator that never ends cannot hang a start
            page = await self.client.list_tools(cursor=cursor)
            listed += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = listed
        self.stale = False
        self.generation += 1

    async def _refresh(self) -> None:
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                await self._list_tools()
        except Exception as exc:
            raise ToolError(f"MCP server {self.config.name!r} said its tools changed, and "
                            f"listing them again failed: {_describe(exc)}") from exc

    async def call(self, tool: str, arguments: dict[str, Any], key: str | None) -> Any:
        """Call ``tool``; its ``CallToolResult``, or ``ToolError`` saying what happened."""
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        client = await self.ensure()
        name, timeout_s = self.config.name, self.config.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s,
                                              meta={IDEMPOTENCY_META: key} if key else None)
        except TimeoutError:
            raise ToolError(f"MCP server {name!r} did not answer {tool} within {timeout_s:g} s "
                            "(timeoutSeconds); Toren stopped waiting. It may still take "
                            "effect.") from None
        except ValidationError as exc:
            raise ToolError(f"MCP server {name!r} answered {tool} with a malformed result: "
                            f"{_first_line(str(exc))}") from exc
        except MCPError as exc:
            if self._holder is None or self._holder.done() or exc.code == -32000:
                self.client = None
                raise ToolError(f"MCP server {name!r} stopped during the call of {tool}: "
                                f"{exc.message}. The call may or may not have taken effect; "
                                f"the server is started again for the next call"
                                f"{await self.stderr_tail()}") from exc
            raise ToolError(f"MCP server {name!r} refused the call of {tool}: "
                            f"{exc.message}") from exc
        except Exception as exc:
            if self._holder is None or self._holder.done():
                self.client = None
            raise ToolError(f"MCP server {name!r} failed the call of {tool}: "
                            f"{_describe(exc)}{await self.stderr_tail()}") from exc

    async def stderr_tail(self) -> str:
        """``; its stderr ends: ...`` with the last lines it wrote, or nothing."""
        handle = self._stderr
        if handle is None:
            return ""

        def read() -> str:
            handle.flush()
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - STDERR_TAIL_CHARS * 4))
            return handle.read()[-STDERR_TAIL_CHARS:]

        try:
            text = (await asyncio.to_thread(read)).strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends:\n{text}" if text else ""

    async def _discard(self) -> None:
        """Stop the holder task, if any (the transport closes the server)."""
        holder, stop = self._holder, self._stop
        self._holder = self._stop = None
        self.client = None
        if holder is not None:
            if stop is not None:
                stop.set()
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(holder)
            except (TimeoutError, Exception):
                holder.cancel()
                with contextlib.suppress(BaseException):
                    await holder

    async def close(self) -> None:
        await self._discard()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class _HttpTransport:
    """The streamable HTTP transport, closing the HTTP client it was given with it."""

    def __init__(self, transport: Any, http: Any) -> None:
        self.transport = transport
        self.http = http

    async def __aenter__(self) -> Any:
        await self.http.__aenter__()
        try:
            return await self.transport.__aenter__()
        except BaseException:
            await self.http.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.transport.__aexit__(*exc_info)
        finally:
            await self.http.__aexit__(None, None, None)


def _whole_line_reads() -> None:
    """Make the SDK's stdio client read a server's output a line at a time, not in pieces.

    It joins what it holds to each 64 KiB piece it reads and splits the whole again: a
    message of n bytes costs n^2 / 64 KiB (a 60 MB image, 80 MB of base64 on one line, took
    nearly two minutes of the worker's event loop). Its reader is given a stream that returns
    only pieces that end a line, joined once, which it then splits once. Done once per
    process, and only while the SDK uses anyio's ``TextReceiveStream`` (a fixed SDK that
    reads otherwise is left alone).
    """
    import mcp.client.stdio as stdio
    from anyio import EndOfStream
    from anyio.streams.text import TextReceiveStream

    if vars(stdio).get("TextReceiveStream") is not TextReceiveStream:
        return

    class WholeLines(TextReceiveStream):
        async def receive(self) -> str:
            pieces: list[str] = []
            while True:
                try:
                    piece = await super().receive()
                except EndOfStream:
                    if pieces:  # the last line, without its newline
                        return "".join(pieces)
                    raise
                pieces.append(piece)
                if "\n" in piece:
                    return "".join(pieces)

    stdio.TextReceiveStream = WholeLines  # type: ignore[attr-defined]


def _client_info() -> Any:
    from mcp_types import Implementation

    return Implementation(name="toren", version=toren.__version__)


def _modern(version: str | None) -> bool:
    return bool(version) and str(version) >= "2026"


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return " ".join(lines[:3])[:500]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {_first_line(str(text))}" if text else type(exc).__name__


@dataclass(eq=False)
class McpServerEntry(ToolSourceEntry):
    """One agent's ``mcpServers.<name>``: its filter and naming over a shared connection."""

    agent: str
    config: ServerConfig
    source: McpToolSource = field(repr=False)

    def __post_init__(self) -> None:
        self.name = self.config.name
        self.prefix = f"{self.config.name}__"
        self.required_env = self.config.required_env
        self._built: tuple[int, list[SourcedTool]] | None = None
        self._started = False

    @property
    def connection(self) -> McpConnection:
        return self.source.connection(self.config)

    async def start(self) -> None:
        connection = self.connection
        if not self._started:
            connection.users += 1
            self._started = True
        await self.tools()

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self.source.release(self.config)

    async def tools(self) -> Sequence[SourcedTool]:
        connection = self.connection
        try:
            await connection.ensure()
        except ToolError as exc:
            raise ToolError(f"agent {self.agent!r}, mcpServers.{self.name}: "
                            f"{exc.message}") from exc
        if self._built is not None and self._built[0] == connection.generation:
            return self._built[1]
        offered = [tool for tool in connection.tools if self.config.offers(tool.name)]
        names = tool_names(self.prefix, [tool.name for tool in offered])
        built = [SourcedTool(
            name=names[tool.name], description=tool.description or tool.title or tool.name,
            parameters=_parameters(tool.input_schema), call=self._caller(tool.name),
            idempotent=self.config.is_idempotent(tool.name)) for tool in offered]
        self._built = (connection.generation, built)
        return built

    def _caller(self, tool: str) -> Any:
        async def call(arguments: dict[str, Any]) -> str | ToolResult:
            try:
                key: str | None = current_tool_call().idempotency_key
            except LookupError:
                key = None
            result = await self.connection.call(tool, arguments, key)
            if all(getattr(block, "type", None) == "text" for block in result.content):
                text, files = result_content(result, tool)
            else:  # base64 to decode, maybe megabytes of it: off the event loop
                text, files = await asyncio.to_thread(result_content, result, tool)
            if files:
                return ToolResult(f"Error: {text}" if result.is_error else text, files=files,
                                  is_error=bool(result.is_error))
            if result.is_error:
                raise ToolError(text or f"{tool} reported an error and said nothing more")
            return text
        return call

    def to_json(self) -> dict[str, Any]:
        config = self.config
        connection = self.source.connections.get(config.connection_key)
        data: dict[str, Any] = {
            "name": self.name, "prefix": self.prefix, "transport": config.transport,
            "server": (f"{config.command} {' '.join(config.args)}".strip() if config.command
                       else config.url)}
        if self._built is not None:
            data["tools"] = [tool.name for tool in self._built[1]]
        elif connection is not None and connection.tools:
            names = tool_names(self.prefix, [tool.name for tool in connection.tools
                                             if config.offers(tool.name)])
            data["tools"] = list(names.values())
        return data


def _parameters(schema: Any) -> dict[str, Any]:
    """The tool's input schema as the model is given it (an object schema, always)."""
    parameters = dict(schema or {})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return parameters


class McpToolSource(ToolSource):
    """The ``mcpServers:`` key: MCP servers' tools, named ``<server>__<tool>``."""

    key = KEY
    description = "MCP servers' tools (mcpServers: in agent.yaml), over stdio or streamable HTTP"

    def __init__(self) -> None:
        self.connections: dict[tuple[Any, ...], McpConnection] = {}

    def bind(self, agent: str, name: str, entry: Mapping[str, Any]) -> ToolSourceEntry:
        return McpServerEntry(agent=agent, config=parse_entry(name, entry), source=self)

    def connection(self, config: ServerConfig) -> McpConnection:
        connection = self.connections.get(config.connection_key)
        if connection is None:
            connection = self.connections[config.connection_key] = McpConnection(config)
        return connection

    async def release(self, config: ServerConfig) -> None:
        """One started entry less; the last one closes the session."""
        connection = self.connections.get(config.connection_key)
        if connection is None:
            return
        connection.users -= 1
        if connection.users <= 0:
            self.connections.pop(config.connection_key, None)
            await connection.close()

    async def close(self) -> None:
        connections, self.connections = list(self.connections.values()), {}
        for connection in connections:
            await connection.close()


__all__ = ["McpServerEntry", "McpToolSource", "ServerConfig", "parse_entry", "result_content",
           "tool_names"]
