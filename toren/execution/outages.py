"""Appends that wait out a short database outage instead of losing what the task holds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from toren.errors import DatabaseUnavailable

log = logging.getLogger(__name__)


async def append_through_outage(append: Callable[[], Awaitable[None]], *, within_s: float,
                                first_delay_s: float, what: str) -> None:
    """Await ``append()``; while it raises ``DatabaseUnavailable`` (the database cannot be
    reached, or has no disk space for the write), try it again after a doubling delay, for
    ``within_s`` seconds at most (the task loop gives ``TOREN_LEASE_TTL``), then let the error
    through (the worker hands the message back to wait out a longer outage).

    An append is a compare-and-swap on its stream's sequence numbers under the lease, so
    trying it again is safe: one that did commit unseen is found by the store, and one made
    after the lease was lost meanwhile raises ``LeaseLost``. What the append records is kept
    in memory meanwhile: a model's answer or a tool's result is written as soon as the
    database takes writes again, not paid for again.
    """
    clock = asyncio.get_running_loop().time
    started = clock()
    delay = first_delay_s
    while True:
        try:
            await append()
            return
        except DatabaseUnavailable as exc:
            # the tries count too: one may wait TOREN_POOL_TIMEOUT for a connection
            if not exc.retryable or clock() - started + delay > within_s:
                raise
            log.info("%s waits %.1fs for the database: %s", what, delay, exc.message)
        await asyncio.sleep(delay)
        delay *= 2
