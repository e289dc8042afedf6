"""Group commit: the appends of concurrent tasks share one transaction (one WAL flush).

``PostgresRunLog.append`` hands its statement to a ``GroupCommit`` of its store. Appends wait
in a list; a flusher task, started on the event loop's next turn, takes them all (up to
``MAX_BATCH``; at most ``MAX_IN_FLIGHT`` batches at once), so the appends that the loop's
tasks make in the same turn share a transaction, and while a batch is being committed the
appends that arrive meanwhile gather for the next one: under load one commit carries many
appends. At concurrency 1 an append waits one turn of the loop (microseconds) and goes out
alone, as one statement in its own implicit transaction, as before grouping. A batch of
several is one round trip and one transaction: when its appends share a batch statement (an
append's ``batch_statement``: the store's ``append_batch``, which runs each append's statement
as a function, in order, each seeing what those before it wrote), that one statement with all
their parameters; otherwise each append's own statement, pipelined
(``toren_postgres.pipelines.one_transaction``). One statement instead of several saves the
worker most of a batch's cost: psycopg sends, waits and reads once, not once per append.

Each append keeps its own compare-and-swap: the statement is the one an append runs alone
(lease held at its epoch, events' primary key), so an append whose lease is gone simply writes
nothing and learns so from its own row. A statement that *fails* (another writer took the
sequence number: a unique violation; a deadlock; a broken connection) aborts the batch's
transaction, so nothing of the batch is committed; each of its appends is then told
``GroupFailed`` and runs again alone, where a conflict fails only its own append and the
others commit as if they had never been grouped.

The flusher keeps the pool connection it borrowed while appends keep coming, and gives it back
after ``HOLD_IDLE_S`` with nothing to append (or when the store closes): borrowing and
returning it for every batch was about 45 of the worker's ~430 Python calls per operation at
concurrency 1, one batch per append (bench/README.md, figure 2). A batch that fails gives it
back at once (the pool rolls it back, or replaces it if it broke); the next borrows afresh.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg import sql
from psycopg.types.json import Json, Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from toren_postgres.connection import out_of_space
from toren_postgres.pipelines import one_transaction

#: Appends in one transaction at most (a bigger batch waits for the next one).
MAX_BATCH = 64
#: Batches in flight at once per store: while one commits, new appends gather for the next.
#: One, as Postgres flushes its WAL: figure 1 (8 pollers) measured 0.76-0.77 transactions per
#: operation with one against 1.00-1.03 with two, at the same operations/s within the noise.
MAX_IN_FLIGHT = 1
#: Seconds the flusher keeps its connection with no append to send before the pool has it back.
HOLD_IDLE_S = 1.0


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
    batch_statement: sql.Composed | None
    future: asyncio.Future[tuple[Any, ...] | GroupFailed | None] = field(repr=False)


def batch_json(params: Sequence[dict[str, Any]]) -> Json:
    """The ``batch`` parameter of a batch statement: a JSON array of the appends' parameters,
    in order. A parameter wrapped in psycopg's ``Json``/``Jsonb`` is given as the JSON text it
    would have been sent as alone (its own ``dumps``, else psycopg's default ``json.dumps``)."""
    return Json(list(params), dumps=_dumps_batch)


def _dumps_batch(value: Any) -> bytes:
    return orjson.dumps(value, default=_json_text)


def _json_text(value: Any) -> str:
    if isinstance(value, Json | Jsonb):
        text = (value.dumps or json.dumps)(value.obj)
        return text.decode() if isinstance(text, bytes) else text
    raise TypeError(f"not a parameter of a batch statement: {type(value).__name__}")


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
        #: The connection kept between batches (``None``: none, or a batch is using it), the
        #: pool it came from, when it was last used and whether a release check is due.
        self._held: psycopg.AsyncConnection[Any] | None = None
        self._held_from: AsyncConnectionPool | None = None
        self._held_since = 0.0
        self._release_due = False
        #: Batches committed and appends they carried (for tests and the benchmarks).
        self.batches = 0
        self.grouped = 0

    async def execute(self, statement: sql.Composed, params: dict[str, Any], *,
                      batch_statement: sql.Composed | None = None
                      ) -> tuple[Any, ...] | GroupFailed | None:
        """Run one append statement in the next batch: its first row (``None`` if none), or
        ``GroupFailed`` if the batch did not commit. ``batch_statement``, if given, runs a
        batch of appends that all give the same one as one statement: it takes ``%(batch)s``
        (``batch_json`` of their ``params``) and returns the row ``statement`` would have
        returned for each, in order."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests, harnesses): start afresh
            self._loop, self._pending, self._in_flight = loop, [], 0
            self._held = self._held_from = None  # of the old loop's pool: it closed it
        future: asyncio.Future[tuple[Any, ...] | GroupFailed | None] = loop.create_future()
        self._pending.append(_Pending(statement, params, batch_statement, future))
        self._kick(loop)
        return await future

    def _kick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a flusher for the waiting appends if fewer than ``max_in_flight`` run."""
        if self._pending and self._in_flight < self.max_in_flight:
            self._in_flight += 1
            flusher = loop.create_task(self._flush(loop))
            self._flushers.add(flusher)  # held until done: the loop keeps weak references
            flusher.add_done_callback(self._flushers.discard)

    async def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while self._pending and self._loop is loop:
                batch = self._pending[:self.max_batch]
                del self._pending[:self.max_batch]
                try:
                    results = await self._run(batch)
                except BaseException as exc:  # cancelled (the loop is closing) or a bug
                    for pending in batch:
                        if not pending.future.done():
                            pending.future.set_exception(
                                exc if isinstance(exc, Exception) else asyncio.CancelledError())
                    raise
                for pending, result in zip(batch, results, strict=True):
                    if not pending.future.done():
                        pending.future.set_result(result)
        finally:
            if self._loop is loop:
                self._in_flight -= 1

    async def _run(self, batch: list[_Pending]
                   ) -> list[tuple[Any, ...] | GroupFailed | None]:
        """One transaction for the batch: each statement's first row, or ``GroupFailed`` for
        all of them if it did not commit."""
        together = batch[0].batch_statement
        if len(batch) == 1 or any(p.batch_statement is not together for p in batch):
            together = None
        rows: list[tuple[Any, ...] | None]
        pool = self._pool()
        conn = self._held if self._held_from is pool else None
        self._held = None
        try:
            if conn is None:
                conn = await pool.getconn()
            if len(batch) == 1:  # alone: one statement, its own implicit transaction
                cursor = await conn.execute(batch[0].statement, batch[0].params)
                rows = [await cursor.fetchone()]
            elif together is not None:  # one statement, its own implicit transaction
                cursor = await conn.execute(
                    together, {"batch": batch_json([p.params for p in batch])})
                rows = list(await cursor.fetchall())
                if len(rows) != len(batch):
                    raise RuntimeError(f"a batch statement returned {len(rows)} rows for "
                                       f"{len(batch)} appends")
            else:
                async with one_transaction(conn):
                    cursors = [await conn.execute(p.statement, p.params) for p in batch]
                rows = [await cursor.fetchone() for cursor in cursors]
        except BaseException as exc:
            if conn is not None:  # the pool rolls it back, or replaces it if it broke
                await pool.putconn(conn)
            if not isinstance(exc, psycopg.Error):
                raise
            # a statement refused for want of disk space rolled back: the connection is fine
            broken = isinstance(exc, psycopg.OperationalError) and not isinstance(
                exc, PoolTimeout) and not out_of_space(exc)
            return [GroupFailed(exc, broken)] * len(batch)
        self._hold(conn, pool)
        self.batches += 1
        self.grouped += len(batch)
        return list(rows)

    def _hold(self, conn: psycopg.AsyncConnection[Any], pool: AsyncConnectionPool) -> None:
        """Keep ``conn`` for the next batch; a check gives it back once idle (``HOLD_IDLE_S``)."""
        loop = self._loop
        if self._held is not None or loop is None:  # another flusher holds one (max_in_flight)
            self._give_back(conn, pool)
            return
        self._held, self._held_from, self._held_since = conn, pool, loop.time()
        if not self._release_due:
            self._release_due = True
            loop.call_later(HOLD_IDLE_S, self._release_if_idle, loop)

    def _release_if_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        self._release_due = False
        if self._held is None or self._loop is not loop:
            return
        idle_for = loop.time() - self._held_since
        if idle_for < HOLD_IDLE_S:  # used meanwhile: look again when it could be idle
            self._release_due = True
            loop.call_later(HOLD_IDLE_S - idle_for, self._release_if_idle, loop)
            return
        conn, pool = self._held, self._held_from
        self._held = self._held_from = None
        if pool is not None:
            self._give_back(conn, pool)

    def _give_back(self, conn: psycopg.AsyncConnection[Any], pool: AsyncConnectionPool) -> None:
        assert self._loop is not None
        task = self._loop.create_task(pool.putconn(conn))
        self._flushers.add(task)  # held until done, as the flushers are
        task.add_done_callback(self._flushers.discard)

    async def release(self) -> None:
        """Give the kept connection back to its pool now (the store is closing)."""
        conn, pool = self._held, self._held_from
        self._held = self._held_from = None
        if conn is not None and pool is not None and self._loop is asyncio.get_running_loop():
            await pool.putconn(conn)
