"""The ``postgres`` queue driver: messages in ``toren_control.queue``, sharing the store's pool.

Claims use ``FOR UPDATE SKIP LOCKED`` and hide a message for a visibility timeout (a worker that
dies without acknowledging it lets it reappear), highest effective priority first and within
each agent's concurrency limit (control migration 0024). A dedicated connection LISTENs on
``toren_queue`` (a trigger NOTIFYs on insert), so an idle worker wakes within milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from psycopg.types.json import Jsonb

from toren.plugin import ConfigError, Settings
from toren.plugin.drivers import OutgoingMessage, Queue, QueueMessage, Store
from toren_postgres.notifications import QueueNotifications
from toren_postgres.queries import query

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


class PostgresQueue(Queue):
    """Messages in the same database as the event log: the store's outbox is this queue's
    table, so an append's messages and the acknowledgement of the message it ends commit in
    the append's transaction.

    Needs the ``postgres`` store driver (it uses the store's connection pool).
    """

    reads_outbox = True
    flow_control = True

    def __init__(self, settings: Settings, store: Store) -> None:
        from toren_postgres.store import PostgresStore

        if not isinstance(store, PostgresStore):
            raise ConfigError("TOREN_QUEUE=postgres needs TOREN_STORE=postgres (the queue lives "
                              "in the store's database)")
        super().__init__(settings, store)
        self.pg_store = store
        self.notifications = QueueNotifications(self._url, "toren-queue-listen")

    def _url(self) -> str:
        assert self.pg_store.url is not None  # the store is open
        return self.pg_store.url

    @property
    def description(self) -> str:
        return "Postgres (toren_control.queue, in the store's database; LISTEN/NOTIFY wake-ups)"

    async def open(self) -> None:
        self.notifications.start()

    async def close(self) -> None:
        await self.notifications.stop()

    async def wait(self, timeout_s: float) -> None:
        await self.notifications.wait(timeout_s)

    async def claim(self, agents: Sequence[str], worker_id: str, limit: int,
                    visibility_s: float, max_deliveries: int
                    ) -> tuple[list[QueueMessage], list[QueueMessage]]:
        params = {"agents": list(agents), "worker_id": worker_id, "limit": limit,
                  "visibility_s": visibility_s, "max_deliveries": max_deliveries,
                  "aging_s": self.settings.priority_aging_s}
        async with self.pg_store.pool.connection() as conn:
            cursor = await conn.execute(query("claim"), params)
            rows = await cursor.fetchall()
        claimed = [replace(_message(row[:6]), waited_s=row[7], priority=row[8])
                   for row in rows if not row[6]]
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

    async def renew(self, worker_id: str, message_ids: Sequence[int],
                    visibility_s: float) -> None:
        # the worker renews through the store's heartbeat instead (reads_outbox): this is
        # the same statement, on its own
        async with self.pg_store.pool.connection() as conn:
            await conn.execute(query("heartbeat_messages"), {
                "worker_id": worker_id, "message_ids": list(message_ids),
                "ttl_s": visibility_s})

    async def enqueue(self, agent: str, run_id: str | None, message: OutgoingMessage) -> None:
        async with self.pg_store.pool.connection() as conn:
            await conn.execute(query("enqueue"), {
                "agent": agent, "run_id": run_id, "kind": message.kind,
                "payload": Jsonb(message.payload), "delay_s": message.delay_s})

    async def depth(self, agents: Sequence[str]) -> dict[str, dict[str, int]] | None:
        async with self.pg_store.pool.connection() as conn:
            cursor = await conn.execute(query("queue_depth"), {"agents": list(agents)})
            rows = await cursor.fetchall()
        found = {agent: {"ready": 0, "in_flight": 0, "delayed": 0, "waiting_concurrency": 0}
                 for agent in agents}
        for agent, ready, in_flight, delayed, waiting in rows:
            found[agent] = {"ready": ready, "in_flight": in_flight, "delayed": delayed,
                            "waiting_concurrency": waiting}
        return found


def _message(row: tuple) -> QueueMessage:  # type: ignore[type-arg]
    message_id, agent, run_id, kind, payload, attempts = row
    return QueueMessage(message_id, agent, str(run_id) if run_id else None, kind, payload, attempts)
