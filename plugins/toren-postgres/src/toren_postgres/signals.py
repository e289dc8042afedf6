"""The ``SignalLog`` of the Postgres store: a signal and its run tick in one statement."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import psycopg
from psycopg.types.json import Json, Jsonb

from toren.plugin import LeaseLost
from toren.plugin.drivers import NewEvent, OutgoingMessage, SignalLog, schema_name_for
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()


class PostgresSignalLog(PostgresConnection, SignalLog):
    """Signals in the agent's ``events`` table, on each run's ``signals`` stream."""

    async def send_signal(self, agent: str, run_id: str, event: NewEvent,
                          messages: Sequence[OutgoingMessage],
                          idempotency_key: str | None = None
                          ) -> tuple[str | None, int | None, bool]:
        statement = agent_query("send_signal", schema_name_for(agent))
        params = {"run_id": run_id, "type": event.type, "agent": agent, "key": idempotency_key,
                  "data": Json(event.data, dumps=_dumps),
                  "messages": Jsonb([{"kind": m.kind, "payload": m.payload,
                                      "delay_s": m.delay_s} for m in messages])}
        for _ in range(20):
            try:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(statement, params)
                    row = await cursor.fetchone()
            except psycopg.errors.UniqueViolation:
                # another signal took that number (it committed while this statement waited
                # on the primary key): look again, seeing it, and take the next one
                continue
            assert row is not None
            status, appended, seen = row[0], row[1], row[2]
            if seen is not None:
                return status, int(seen), False
            return status, appended, appended is not None
        raise LeaseLost(f"could not append a signal to run {run_id}: its signals stream kept "
                        "moving; try again")
