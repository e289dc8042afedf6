"""The ``ForkStore`` of the Postgres store: a fork's run row, copied log and first messages in
one statement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from psycopg.types.json import Json, Jsonb

from toren.plugin.drivers import ForkStore, NewEvent, OutgoingMessage, events, schema_name_for
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query


def _events_json(streams: Mapping[str, Sequence[NewEvent]]) -> Json:
    rows = [{"stream": stream, "seq": seq, "type": event.type, "data": event.data}
            for stream, events in streams.items() for seq, event in enumerate(events, start=1)]
    return Json(rows, dumps=lambda value: orjson.dumps(value).decode())


class PostgresForkStore(PostgresConnection, ForkStore):
    """Forks in the agent's own ``runs`` and ``events`` tables (no schema of their own)."""

    async def create_fork(self, agent: str, run_id: str, input: Any, *,
                          streams: Mapping[str, Sequence[NewEvent]],
                          messages: Sequence[OutgoingMessage]) -> None:
        # the run it is a fork of, from its RunForked event: indexed, so the source lists
        # its forks (PostgresRunReader.fork_runs)
        forked_from = next((event.data["source_run_id"]
                            for event in streams.get(events.RUN_STREAM, ())
                            if event.type == events.RUN_FORKED), None)
        params = {"run_id": run_id, "input": Jsonb(input), "agent": agent,
                  "forked_from": forked_from,
                  "events": _events_json(streams),
                  "messages": Jsonb([{"kind": m.kind, "payload": m.payload,
                                      "delay_s": m.delay_s} for m in messages])}
        async with self.pool.connection() as conn:
            await conn.execute(agent_query("create_fork", schema_name_for(agent)), params)
