"""Group commit: the appends of concurrent tasks share one transaction (one WAL flush).

``PostgresRunLog.append`` hands its statement to a ``GroupCommit`` of its store. While a batch
is being committed, the appends that arrive meanwhile wait in a list; the next batch takes them
all, so at concurrency 1 an append goes out at once, alone, exactly as before, and under load
one commit carries many appends. A batch is one round trip: ``BEGIN``, each append's own
statement, ``COMMIT``, pipelined.

Each append keeps its own compare-and-swap: the statement is the one an append runs alone
(lease held at its epoch, events' primary key), so an append whose lease is gone simply writes
nothing and learns so from its own row. A statement that *fails* (another writer took the
sequence number: a unique violation; a deadlock; a broken connection) aborts the batch's
transaction, so nothing of the batch is committed; each of its appends is then told
``GROUP_FAILED`` and runs again alone, where a conflict fails only its own append and the
others commit as if they had never been grouped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

#: Appends in one transaction at most (a bigger batch waits for the next one).
MAX_BATCH = 64
#: Batches in flight at once per store: while they commit, new appends gather for the next.
MAX_IN_FLIGHT = 2


@dataclass(frozen=True)
class GroupFailed:
    """The batch an append was in did not commit (nothing of it did): run the append alone.

    ``broken`` is set when the connection broke with the batch in flight; the batch may then
    have committed, so the caller must look at the log before writing again."""

    error: Exception
    broken: bool


@dataclass
class _Pending:
    statement: sql.Composed
    params: dict[str, Any]
    future: asyncio.Future[tuple[Any, ...] | GroupFailed | None] = field(repr=False)


class GroupCommit:
    """Coalesces concurrent append statements into shared transactions (see the module).

    Created by ``PostgresRunLog`` for its pool; ``execute`` is called once per append, from
    any number of tasks of one event loop.
    """

    def __init__(self, pool: Callable[[], AsyncConnectionPool], *, max_batch: int = MAX_BATCH,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._pool = pool
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        self._pending: list[_Pending] = []
        self._in_flight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flushers: set[asyncio.Task[None]] = set()
        #: Batches committed and appends they carried (for tests and the benchmarks).
        self.batches = 0
        self.grouped = 0

    async def execute(self, statement: sql.Composed, params: dict[str, Any]
                      ) -> tuple[Any, ...] | GroupFailed | None:
        """Run one append statement in the next batch: its first row (``None`` if none), or
        ``GroupFailed`` if the batch did not commit."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests, harnesses): start afresh
            self._loop, self._pending, self._in_flight = loop, [], 0
        future: asyncio.Future[tuple[Any, ...] | GroupFailed | None] = loop.create_future()
        self._pending.append(_Pending(statement, params, future))
        if self._in_flight < self.max_in_flight:
            self._in_flight += 1
            flusher = loop.create_task(self._flush(loop))
            self._flushers.add(flusher)  # held until done: the loop keeps weak references
            flusher.add_done_callback(self._flushers.discard)
        return await future

    async def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while self._pending and self._loop is loop:
                batch = self._pending[:self.max_batch]
                del self._pending[:self.max_batch]
                await self._commit(batch)
        finally:
            if self._loop is loop:
                self._in_flight -= 1

    async def _commit(self, batch: list[_Pending]) -> None:
        try:
            async with self._pool().connection() as conn:
                if len(batch) == 1:  # alone: one statement, its own implicit transaction
                    cursors = [await conn.execute(batch[0].statement, batch[0].params)]
                else:
                    async with conn.pipeline(), conn.transaction():
                        cursors = [await conn.execute(p.statement, p.params) for p in batch]
                rows = [await cursor.fetchone() for cursor in cursors]
        except psycopg.Error as exc:
            broken = isinstance(exc, psycopg.OperationalError) and not isinstance(
                exc, PoolTimeout)
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_result(GroupFailed(exc, broken))
            return
        except BaseException as exc:  # cancelled (the loop is closing) or a bug: tell them
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc if isinstance(exc, Exception)
                                                 else asyncio.CancelledError())
            raise
        self.batches += 1
        self.grouped += len(batch)
        for pending, row in zip(batch, rows, strict=True):
            if not pending.future.done():
                pending.future.set_result(row)
