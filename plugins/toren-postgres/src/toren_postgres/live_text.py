"""``LiveText`` in Postgres: pieces of model text as NOTIFY ``toren_text`` payloads, sent only
for runs a server process watches (``toren_control.watched_runs``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from toren.plugin.drivers import LiveText
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.notifications import listen_forever
from toren_postgres.queries import query

CHANNEL = "toren_text"


class PostgresLiveText(PostgresConnection, LiveText):
    """Publishes with one ``pg_notify`` statement per batch, whatever the number of runs in it
    (payloads in order, each under NOTIFY's 8000 bytes, which the host's encoding keeps);
    listens on a dedicated connection."""

    async def publish_text(self, run_id: str, payloads: Sequence[str]) -> bool:
        return run_id in await self.publish_texts({run_id: payloads})

    async def publish_texts(self, payloads: Mapping[str, Sequence[str]]) -> set[str]:
        run_ids = [run_id for run_id, texts in payloads.items() for _ in texts]
        texts = [text for texts in payloads.values() for text in texts]
        if not texts:
            return set()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("publish_texts"), {
                "run_ids": array_literal(run_ids, quote=False),
                "payloads": array_literal(texts)})
            rows = await cursor.fetchall()
        return {str(row[0]) for row in rows}

    async def listen_text(self, deliver: Callable[[str], None]) -> None:
        def url() -> str:
            if self.url is None:
                raise RuntimeError("PostgresLiveText.open() has not been awaited")
            return self.url

        await listen_forever(url, CHANNEL, deliver, lambda: None, "the live text listener")


def array_literal(values: Sequence[str], *, quote: bool = True) -> str:
    """``values`` as the text of a Postgres array (``{"a","b"}``), which the statement casts.

    Built here because psycopg's list dumper escapes each element with a regular expression,
    a measurable share of a busy worker's CPU (each payload is JSON, so every one has quotes
    to escape). ``quote=False`` for elements that need no quoting (uuids)."""
    if not quote:
        return "{" + ",".join(values) + "}"
    return "{" + ",".join('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
                          for value in values) + "}"
