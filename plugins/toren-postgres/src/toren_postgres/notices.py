"""Append notices for live readers: watched runs in ``toren_control.watched_runs``, whose
appends NOTIFY ``toren_appends``, and one LISTEN connection per process that collects them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Collection

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from toren_postgres.queries import query

log = logging.getLogger(__name__)
CHANNEL = "toren_appends"
#: Seconds a watch lives without renewal: a process that dies stops costing NOTIFYs after this.
WATCH_TTL_S = 30.0


class AppendNotices:
    """``Store.wait_for_appends`` for the ``postgres`` store (one per store, one caller)."""

    def __init__(self, url: str, pool: AsyncConnectionPool, connect_timeout_s: float) -> None:
        self.url = url
        self.pool = pool
        self.connect_timeout_s = connect_timeout_s
        self.watcher = f"{uuid.uuid4()}"
        self._watched: set[str] = set()
        self._renewed_at = 0.0
        self._pending: set[str] = set()
        self._notified = asyncio.Event()
        self._listening = False
        # nothing was watched or heard yet: the first answer once listening is "look again"
        self._gap = True
        self._listener: asyncio.Task[None] | None = None

    async def wait(self, run_ids: Collection[str], timeout_s: float) -> set[str] | None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="toren-append-notices")
        wanted = set(run_ids)
        try:
            fresh = await self._sync(wanted)
        except (psycopg.Error, PoolTimeout) as exc:
            # appends go unannounced while the watches cannot be written: say so once back
            log.debug("cannot update the watched runs: %s", exc)
            self._gap = True
            await asyncio.sleep(timeout_s)
            return set()
        if self._gap and self._listening:
            self._gap = False
            self._pending.clear()
            self._notified.clear()
            return None
        if not fresh:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._notified.wait()
        self._notified.clear()
        found, self._pending = (self._pending & wanted) | fresh, set()
        return found

    async def _sync(self, wanted: set[str]) -> set[str]:
        """Write the watches that changed (and renew them every third of their TTL); return
        the runs watched only now."""
        added, removed = wanted - self._watched, self._watched - wanted
        renew = bool(wanted) and time.monotonic() - self._renewed_at > WATCH_TTL_S / 3
        if not (added or removed or renew):
            return set()
        params = {"watcher": self.watcher, "ttl_s": WATCH_TTL_S}
        async with self.pool.connection() as conn:
            if added:
                await conn.execute(query("watch_runs"), params | {"run_ids": sorted(added)})
            if removed:
                await conn.execute(query("unwatch_runs"), params | {"run_ids": sorted(removed)})
            if renew:
                await conn.execute(query("renew_watches"), params)
        self._watched = wanted
        if renew:
            self._renewed_at = time.monotonic()
        return added

    async def _listen(self) -> None:
        """Keep the LISTEN connection (outside the pool: it is held for good); reconnect with
        backoff when the database goes away."""
        delay = 0.5
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout_s)))
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.5
                    self._listening = True
                    self._notified.set()  # the next answer is "look again"
                    async for notice in conn.notifies():
                        self._pending.add(notice.payload)
                        self._notified.set()
            except psycopg.Error as exc:
                log.warning("the listener for new events lost its connection (%s); live event "
                            "streams poll until it is back, retrying in %.1fs", exc, delay)
            self._listening = False
            self._gap = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    async def close(self) -> None:
        """Stop listening and drop this process's watches (best effort: they expire anyway)."""
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._watched:
            with contextlib.suppress(psycopg.Error, PoolTimeout):
                async with self.pool.connection(timeout=2) as conn:
                    await conn.execute(query("unwatch_runs"), {
                        "watcher": self.watcher, "run_ids": sorted(self._watched)})
            self._watched = set()
