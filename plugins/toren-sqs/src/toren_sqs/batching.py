"""Coalesce single SQS calls into batch calls: ``SendMessageBatch`` and ``DeleteMessageBatch``
take up to ten entries of one queue, so ten concurrent sends cost one request, not ten."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: SQS's largest batch.
MAX_BATCH = 10

#: Sends the entries of one queue as one batch call; returns, per entry, ``None`` for success
#: or the error to raise to that entry's caller.
FlushBatch = Callable[[str, list[dict[str, Any]]], Awaitable[list[Exception | None]]]


@dataclass
class _Pending:
    entries: list[dict[str, Any]] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class Batcher:
    """Collects entries per queue URL for ``linger_s`` (or until ten are waiting), then sends
    them with one ``flush`` call. Each ``submit`` returns once its own entry was sent, or
    raises that entry's error: one failed entry fails only its caller.

    Args:
        flush: the batch call (see ``FlushBatch``).
        linger_s: how long a lone entry waits for company; a few milliseconds is enough to
            catch the entries of concurrent tasks, and is what a lone entry pays.
    """

    def __init__(self, flush: FlushBatch, *, linger_s: float = 0.002) -> None:
        self._flush = flush
        self._linger_s = linger_s
        self._pending: dict[str, _Pending] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, queue_url: str, entry: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        pending = self._pending.setdefault(queue_url, _Pending())
        waiter: asyncio.Future[None] = loop.create_future()
        pending.entries.append(entry)
        pending.waiters.append(waiter)
        if len(pending.entries) >= MAX_BATCH:
            self._start(queue_url)
        elif pending.timer is None:
            pending.timer = loop.call_later(self._linger_s, self._start, queue_url)
        await waiter

    def _start(self, queue_url: str) -> None:
        pending = self._pending.pop(queue_url, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._send(queue_url, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, queue_url: str, pending: _Pending) -> None:
        for start in range(0, len(pending.entries), MAX_BATCH):
            entries = pending.entries[start:start + MAX_BATCH]
            waiters = pending.waiters[start:start + MAX_BATCH]
            try:
                outcomes = await self._flush(queue_url, entries)
            except Exception as exc:  # the whole call failed: every entry of it did
                outcomes = [exc] * len(entries)
            for waiter, outcome in zip(waiters, outcomes, strict=True):
                if waiter.done():
                    continue
                if outcome is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(outcome)

    async def close(self) -> None:
        """Send what is waiting and wait for batches in flight."""
        for queue_url in list(self._pending):
            self._start(queue_url)
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks, return_exceptions=True)
