"""The ``postgres`` queue driver: messages in ``toren_control.queue``, sharing the store's pool.

Claims use ``FOR UPDATE SKIP LOCKED`` and hide a message for a visibility timeout (a worker that
dies without acknowledging it lets it reappear). A dedicated connection LISTENs on
``toren_queue`` (a trigger NOTIFYs on insert), so an idle worker wakes within milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import psycopg
from psycopg.types.json import Jsonb

from toren.config import Settings
from toren.errors import ConfigError
from toren.seams.interfaces import OutgoingMessage, Queue, QueueMessage, Store
from toren_postgres.queries import query

log = logging.getLogger(__name__)
CHANNEL = "toren_queue"


class PostgresQueue(Queue):
    """Messages in the same database as the event log, so enqueue and append share a transaction.

    Needs the ``postgres`` store driver (it uses the store's connection pool).
    """

    def __init__(self, settings: Settings, store: Store) -> None:
        from toren_postgres.store import PostgresStore

        if not isinstance(store, PostgresStore):
            raise ConfigError("TOREN_QUEUE=postgres needs TOREN_STORE=postgres (the queue lives "
                              "in the store's database)")
        super().__init__(settings, store)
        self.pg_store = store
        self._wakeup = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    @property
    def description(self) -> str:
        return "Postgres (toren_control.queue, in the store's database; LISTEN/NOTIFY wake-ups)"

    async def open(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="toren-queue-listen")

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None

    async def _listen(self) -> None:
        """Keep a LISTEN connection; reconnect with backoff when the database goes away."""
        delay = 0.5
        while True:
            try:
                assert self.pg_store.url is not None
                conn = await psycopg.AsyncConnection.connect(self.pg_store.url, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.5
                    self._wakeup.set()  # messages may have arrived while we were not listening
                    async for _ in conn.notifies():
                        self._wakeup.set()
            except asyncio.CancelledError:
                raise
            except psycopg.Error as exc:
                log.warning("queue listener lost its connection (%s); retrying in %.1fs",
                            exc, delay)
                self._wakeup.set()  # fall back to polling meanwhile
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def wait(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout_s)
        self._wakeup.clear()

    async def claim(self, agents: Sequence[str], worker_id: str, limit: int,
                    visibility_s: float, max_deliveries: int
                    ) -> tuple[list[QueueMessage], list[QueueMessage]]:
        params = {"agents": list(agents), "worker_id": worker_id, "limit": limit,
                  "visibility_s": visibility_s, "max_deliveries": max_deliveries}
        async with self.pg_store.pool.connection() as conn:
            cursor = await conn.execute(query("claim"), params)
            rows = await cursor.fetchall()
        claimed = [_message(row[:6]) for row in rows if not row[6]]
        dead = [_message(row[:6]) for row in rows if row[6]]
        return claimed, dead

    async def ack(self, message: QueueMessage, worker_id: str) -> None:
        async with self.pg_store.pool.connection() as conn:
            await conn.execute(query("ack"), {"id": message.id, "worker_id": worker_id})

    async def defer(self, message: QueueMessage, worker_id: str, delay_s: float) -> None:
        async with self.pg_store.pool.connection() as conn:
            await conn.execute(query("defer"), {"id": message.id, "worker_id": worker_id,
                                                "delay_s": delay_s})

    async def return_unknown(self, worker_id: str, held: Sequence[int]) -> int:
        async with self.pg_store.pool.connection() as conn:
            cursor = await conn.execute(query("return_unknown"), {
                "worker_id": worker_id, "held": list(held)})
            return cursor.rowcount

    async def enqueue(self, agent: str, run_id: str | None, message: OutgoingMessage) -> None:
        async with self.pg_store.pool.connection() as conn:
            await conn.execute(query("enqueue"), {
                "agent": agent, "run_id": run_id, "kind": message.kind,
                "payload": Jsonb(message.payload), "delay_s": message.delay_s})


def _message(row: tuple) -> QueueMessage:  # type: ignore[type-arg]
    message_id, agent, run_id, kind, payload, attempts = row
    return QueueMessage(message_id, agent, str(run_id) if run_id else None, kind, payload, attempts)
