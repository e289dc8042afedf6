"""Wake-ups by LISTEN/NOTIFY: a trigger NOTIFYs ``toren_queue`` when a ready message enters the
queue table (the outbox), ``toren_webhooks`` when a webhook delivery is written; one dedicated
connection per listener LISTENs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg

log = logging.getLogger(__name__)
CHANNEL = "toren_queue"


class QueueNotifications:
    """Keeps a LISTEN connection on ``channel`` (reconnecting with backoff) and lets ``wait``
    return as soon as a notification arrives; while the connection is down, ``wait`` degrades
    to polling. Used by the queue, the outbox relay and the webhook dispatcher."""

    def __init__(self, url: Callable[[], str], name: str, channel: str = CHANNEL) -> None:
        self._url = url
        self._name = name
        self._channel = channel
        self._wakeup = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name=self._name)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None

    async def wait(self, timeout_s: float) -> None:
        """Return when a message may be ready (a notification) or after ``timeout_s``."""
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that
        # arrives as the event is set (gh-86296), and the loop that was being stopped (the
        # outbox relay, the webhook dispatcher) would then run on and its stop() never return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._wakeup.wait()
        self._wakeup.clear()

    async def _listen(self) -> None:
        await listen_forever(self._url, self._channel, lambda payload: self._wakeup.set(),
                             self._wakeup.set, self._name)


async def listen_forever(url: Callable[[], str], channel: str, deliver: Callable[[str], None],
                         on_gap: Callable[[], None], name: str) -> None:
    """LISTEN on ``channel`` over a dedicated connection, handing ``deliver`` each payload,
    until cancelled; reconnect with backoff when the connection is lost. ``on_gap`` is called
    when listening starts and when the connection is lost: notifications may have been missed."""
    delay = 0.5
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(url(), autocommit=True)
            async with conn:
                await conn.execute(f"LISTEN {channel}")
                delay = 0.5
                on_gap()  # notifications may have come while we were not listening
                async for notice in conn.notifies():
                    deliver(notice.payload)
        except asyncio.CancelledError:
            raise
        except psycopg.Error as exc:
            log.warning("%s lost its connection (%s); retrying in %.1fs", name, exc, delay)
            on_gap()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
