"""``LiveText`` in Postgres: pieces of model text as NOTIFY ``toren_text`` payloads, sent only
for runs a server process watches (``toren_control.watched_runs``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toren.seams.store import LiveText
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.notifications import listen_forever
from toren_postgres.queries import query

CHANNEL = "toren_text"


class PostgresLiveText(PostgresConnection, LiveText):
    """Publishes with one ``pg_notify`` statement per batch (payloads in order, each under
    NOTIFY's 8000 bytes, which the host's encoding keeps); listens on a dedicated connection."""

    async def publish_text(self, run_id: str, payloads: Sequence[str]) -> bool:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("publish_text"),
                                        {"run_id": run_id, "payloads": list(payloads)})
            row = await cursor.fetchone()
        return bool(row and row[0])

    async def listen_text(self, deliver: Callable[[str], None]) -> None:
        def url() -> str:
            if self.url is None:
                raise RuntimeError("PostgresLiveText.open() has not been awaited")
            return self.url

        await listen_forever(url, CHANNEL, deliver, lambda: None, "the live text listener")
