"""An event stream's wait: woken by a notice, a look or model text, ended by its deadline, and
told when its client has gone, all without a timer per wake-up."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
from aiohttp import web

from toren.server import streams
from toren.server.streams import ClientGone, StreamSlot


class Transport:
    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing


class Request:
    """What a wait reads of the request: its transport (``None`` once the connection is gone)."""

    def __init__(self) -> None:
        self.transport: Transport | None = Transport()


def slot_and_request() -> tuple[StreamSlot, web.Request, Request]:
    request = Request()
    return StreamSlot(cast(Any, None), "run-1"), cast(web.Request, request), request


async def later(delay_s: float, action: Any) -> None:
    await asyncio.sleep(delay_s)
    action()


async def test_a_notice_a_look_and_a_deadline_end_a_wait() -> None:
    slot, request, _ = slot_and_request()
    asyncio.get_running_loop().call_later(0.02, slot.notice)
    assert await slot.wait(5.0, request) is True
    asyncio.get_running_loop().call_later(0.02, slot.look)
    assert await slot.wait(5.0, request) is False
    started = time.monotonic()
    assert await slot.wait(0.15, request) is None
    assert 0.14 <= time.monotonic() - started < 1.0
    assert await slot.wait(0.0, request) is None  # nothing to wait for
    slot.close()


async def test_a_later_deadline_is_kept_after_an_earlier_wait() -> None:
    """A wait's deadline is its own: a tick left from a shorter wait does not end a longer one."""
    slot, request, _ = slot_and_request()
    assert await slot.wait(0.05, request) is None
    started = time.monotonic()
    assert await slot.wait(0.3, request) is None
    assert time.monotonic() - started >= 0.29
    slot.close()


async def test_model_text_is_written_while_waiting_and_can_ask_for_a_read() -> None:
    slot, request, _ = slot_and_request()
    written: list[int] = []

    async def write_text() -> bool:
        written.append(1)
        return len(written) == 2  # the second piece waits for its call's start to be read

    loop = asyncio.get_running_loop()
    loop.call_later(0.01, slot.text)
    loop.call_later(0.05, slot.text)
    assert await slot.wait(5.0, request, write_text) is True
    assert written == [1, 1]
    slot.close()


async def test_a_client_gone_is_told_within_the_check_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "SSE_CLIENT_CHECK_S", 0.05)
    slot, request, raw = slot_and_request()

    def hang_up() -> None:
        assert raw.transport is not None
        raw.transport.closing = True

    asyncio.get_running_loop().call_later(0.1, hang_up)
    started = time.monotonic()
    with pytest.raises(ClientGone):
        await slot.wait(30.0, request)
    assert time.monotonic() - started < 1.0
    with pytest.raises(ClientGone):  # and every wait after it
        await slot.wait(30.0, request)
    slot.close()


async def test_a_closed_slot_checks_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "SSE_CLIENT_CHECK_S", 0.02)
    slot, request, raw = slot_and_request()
    asyncio.get_running_loop().call_later(0.01, slot.notice)
    assert await slot.wait(30.0, request) is True
    slot.close()
    raw.transport = None
    await asyncio.sleep(0.1)
    assert not slot.signal.is_set()  # no tick ran after close


async def test_only_a_waiting_stream_whose_client_reads_is_written_directly() -> None:
    """The hub writes to a stream only while its task waits with nothing pending and its
    client has read all but ``DIRECT_WRITE_LIMIT`` bytes (a real connection whose reader
    stopped reading)."""
    loop = asyncio.get_running_loop()
    stalled: asyncio.Future[asyncio.Transport] = loop.create_future()

    class Stalled(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            transport.pause_reading()  # a client that stopped reading
            stalled.set_result(transport)

    server = await loop.create_server(Stalled, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    await stalled
    slot, request, _ = slot_and_request()
    try:
        assert not slot.idle()  # no transport handed over: never written directly
        slot.write_directly(transport)
        assert not slot.idle()  # its task is not waiting
        waiting = asyncio.create_task(slot.wait(5.0, request))
        await asyncio.sleep(0.01)
        assert slot.parked and slot.idle()
        slot.signal.set()  # something pending: the task is about to run
        assert not slot.idle()
        slot.signal.clear()
        assert slot.idle()
        transport.write(b"x" * (8 * 1024 * 1024))  # more than the kernel's buffers take
        assert transport.get_write_buffer_size() > streams.DIRECT_WRITE_LIMIT
        assert not slot.idle()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not slot.parked
    finally:
        slot.close()
        transport.abort()
        (await stalled).abort()
        server.close()
        await server.wait_closed()
