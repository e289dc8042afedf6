"""The ``Outbox`` in Postgres: the queue table is the outbox, so a relay claims from it too.

Every write that sends messages inserts them into ``toren_control.queue`` in its own
statement (see ``queries.sql``). The Postgres queue claims them there (``reads_outbox``);
with any other queue, the outbox relay claims them with ``claim_outbox`` (the same
``FOR UPDATE SKIP LOCKED`` claim and visibility timeout as the queue's, without counting
deliveries or dead-lettering), sends them, and deletes them with ``ack_outbox``.
"""

from __future__ import annotations

from collections.abc import Sequence

from toren.plugin import Settings
from toren.plugin.drivers import Outbox, OutboxEntry
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.notifications import QueueNotifications
from toren_postgres.queries import query


class PostgresOutbox(PostgresConnection, Outbox):
    """The ``Outbox`` of the Postgres store. An idle relay wakes on the queue table's
    notifications (its own LISTEN connection, opened at the first ``wait_outbox``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._notifications: QueueNotifications | None = None

    async def close(self) -> None:
        if self._notifications is not None:
            await self._notifications.stop()
            self._notifications = None
        await super().close()

    async def wait_outbox(self, timeout_s: float) -> None:
        if self._notifications is None:
            self._notifications = QueueNotifications(self._listen_url, "toren-outbox-listen")
            self._notifications.start()
        await self._notifications.wait(timeout_s)

    def _listen_url(self) -> str:
        assert self.url is not None  # open() resolved it
        return self.url

    async def claim_outbox(self, agents: Sequence[str], relay_id: str, limit: int,
                           visibility_s: float) -> list[OutboxEntry]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("claim_outbox"), {
                "agents": list(agents), "relay_id": relay_id, "limit": limit,
                "visibility_s": visibility_s})
            rows = await cursor.fetchall()
        return [OutboxEntry(entry_id, agent, str(run_id) if run_id else None, kind, payload)
                for entry_id, agent, run_id, kind, payload in rows]

    async def ack_outbox(self, relay_id: str, entry_ids: Sequence[int]) -> int:
        if not entry_ids:
            return 0
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("ack_outbox"), {
                "relay_id": relay_id, "ids": list(entry_ids)})
            return cursor.rowcount
