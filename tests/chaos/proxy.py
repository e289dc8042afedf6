"""TCP proxies in front of Postgres. ``FaultProxy`` breaks a connection at the worst moment:
after the server has executed (and, in autocommit, committed) a statement but before the
client hears back, so the client cannot know whether its commit happened. ``LinkProxy`` cuts
and slows the link itself, for every connection through it."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg.conninfo import conninfo_to_dict, make_conninfo

T = TypeVar("T")


@dataclass
class PostgresProxy(abc.ABC):
    """What both proxies share: ``await proxy.start()`` listens on a free loopback port, and
    ``proxy.url`` reaches the database of ``upstream_url`` through it; each accepted
    connection is served by ``_serve`` (the subclass's own) over one to Postgres."""

    upstream_url: str
    url: str = ""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._listening_on(self._server.sockets[0].getsockname()[1])

    def _listening_on(self, port: int) -> None:
        params = conninfo_to_dict(self.upstream_url)
        params.update(host="127.0.0.1", port=str(port), sslmode="disable")
        self.url = make_conninfo(**params)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        params = conninfo_to_dict(self.upstream_url)
        host = str(params.get("host") or "127.0.0.1")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    @abc.abstractmethod
    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        """Serve one accepted connection until either side closes it."""


@dataclass
class FaultProxy(PostgresProxy):
    """``arm(mode)`` breaks the next statement sent on any connection (with ``match``, the
    next one whose message holds those bytes, e.g. a table only that statement names):
    ``"after_commit"`` forwards it, waits for the server's answer and drops it;
    ``"before_send"`` drops the statement unsent."""

    armed: str | None = None
    match: bytes | None = None
    broken: int = 0

    def arm(self, mode: str, match: bytes | None = None) -> None:
        assert mode in ("after_commit", "before_send")
        self.armed, self.match = mode, match

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await self._open_upstream()
        ready = asyncio.Event()  # set once the session is set up (startup is never broken)
        down = asyncio.create_task(self._pump(server_r, client_w, ready))
        self._tasks.add(down)
        try:
            while chunk := await client_r.read(65536):
                # Statement messages: Query ('Q') or the extended protocol's Parse/Bind ('P',
                # 'B'); the startup packet and authentication are never broken.
                if (self.armed and ready.is_set() and chunk[:1] in (b"Q", b"P", b"B")
                        and (self.match is None or self.match in chunk)):
                    mode, self.armed = self.armed, None
                    self.broken += 1
                    if mode == "after_commit":
                        server_w.write(chunk)
                        await server_w.drain()
                        down.cancel()
                        await _read_until_ready_for_query(server_r)
                    break
                server_w.write(chunk)
                await server_w.drain()
        finally:
            down.cancel()
            for writer in (client_w, server_w):
                writer.close()
                with contextlib.suppress(OSError, ConnectionError):
                    await writer.wait_closed()
            self._tasks.discard(down)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    ready: asyncio.Event) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while chunk := await reader.read(65536):
                if b"Z\x00\x00\x00\x05" in chunk:  # ReadyForQuery: the session is set up
                    ready.set()
                writer.write(chunk)
                await writer.drain()


async def _read_until_ready_for_query(reader: asyncio.StreamReader) -> None:
    """Swallow the server's answer up to its ReadyForQuery: the statement has completed (and
    in autocommit, committed) when it arrives."""
    seen = b""
    while b"Z\x00\x00\x00\x05" not in seen:
        chunk = await asyncio.wait_for(reader.read(65536), 10)
        if not chunk:
            return
        seen = seen[-16:] + chunk


@dataclass
class LinkProxy(PostgresProxy):
    """A proxy whose link to Postgres can be cut and slowed, for every connection through it.

    ``cut()`` is a partition, or a half-open link: nothing passes either way and no socket is
    closed (no FIN, no RST), so each side waits for an answer that does not come; the bytes
    sent meanwhile are held and delivered in order on ``heal()``, as TCP would retransmit
    them once the link is back. ``delay_s`` holds every chunk that long in each direction
    before passing it on (a round trip gains twice ``delay_s``); chunks keep their order and
    do not queue behind each other's delay.

    ``stall()`` cuts the link and stops reading too: with a small ``receive_buffer`` the
    proxy's kernel soon advertises a zero window and the client's data waits unsent, as for
    a peer that takes no more data. A user-space proxy cannot drop packets (its kernel
    acknowledges what it receives, keepalive probes included), so this is the nearest it
    comes to a dead peer that the client's kernel itself can notice (TCP_USER_TIMEOUT bounds
    a zero window's wait as it bounds unacknowledged data's, Linux 5.11 and later).
    """

    delay_s: float = 0.0
    #: SO_RCVBUF of the sockets the proxy accepts (bytes), or the system's default.
    receive_buffer: int | None = None
    #: Connections accepted so far.
    connections: int = 0
    _flowing: asyncio.Event = field(default_factory=asyncio.Event)
    _reading: asyncio.Event = field(default_factory=asyncio.Event)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._flowing.set()
        self._reading.set()

    async def start(self) -> None:
        if self.receive_buffer is None:
            await super().start()
            return
        # set before listen(): accepted sockets inherit it, and the window scale follows it
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        listener.bind(("127.0.0.1", 0))
        self._server = await asyncio.start_server(self._serve, sock=listener)
        self._listening_on(listener.getsockname()[1])

    def cut(self) -> None:
        self._flowing.clear()

    def stall(self) -> None:
        self._flowing.clear()
        self._reading.clear()

    def heal(self) -> None:
        self._flowing.set()
        self._reading.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0)  # connections accepted just now: let them register
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        for writer in self._writers:  # whatever a cancellation left open
            writer.transport.abort()
        self._writers.clear()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        this = asyncio.current_task()
        assert this is not None
        self._tasks.add(this)
        self.connections += 1
        self._writers.add(client_w)
        server_w: asyncio.StreamWriter | None = None
        relays: list[asyncio.Task[None]] = []
        try:
            server_r, server_w = await self._open_upstream()
            self._writers.add(server_w)
            relays = [asyncio.create_task(self._relay(client_r, server_w)),
                      asyncio.create_task(self._relay(server_r, client_w))]
            await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass  # cancelled by stop(): the connection task ends here, quietly
        finally:
            for relay in relays:
                relay.cancel()
            await asyncio.gather(*relays, return_exceptions=True)
            for writer in (client_w, server_w):
                if writer is not None:
                    writer.close()
                    with contextlib.suppress(OSError, ConnectionError):
                        await writer.wait_closed()
                    self._writers.discard(writer)
            self._tasks.discard(this)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Pass one direction's chunks on, each ``delay_s`` after it was read and only while
        the link flows; return once the reader's end is closed and all it sent has passed."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def send() -> None:
            while (item := await chunks.get()) is not None:
                due, chunk = item
                await self._flowing.wait()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                await self._flowing.wait()  # cut while this chunk waited out its delay
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            with contextlib.suppress(OSError, ConnectionError):
                while True:
                    await self._reading.wait()
                    if not (chunk := await reader.read(65536)):
                        break
                    chunks.put_nowait((loop.time() + self.delay_s, chunk))
            chunks.put_nowait(None)
            with contextlib.suppress(OSError, ConnectionError):
                await sender
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                await sender


class ProxyThread:
    """A ``LinkProxy`` served by an event loop of its own in a thread, so that a synchronous
    test can send ``toren worker`` processes through it while it waits on them."""

    def __init__(self, upstream_url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="link-proxy")
        self._thread.start()
        self.proxy = LinkProxy(upstream_url)
        self._call(self.proxy.start())

    @property
    def url(self) -> str:
        return self.proxy.url

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.cut)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.heal)

    def close(self) -> None:
        self._call(self.proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
