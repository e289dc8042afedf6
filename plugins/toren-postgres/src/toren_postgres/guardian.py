"""The ``Guardian`` in Postgres: one statement per agent schema finds and nudges orphaned runs."""

from __future__ import annotations

from collections.abc import Sequence

from toren.plugin.drivers import Guardian, schema_name_for
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query


class PostgresGuardian(PostgresConnection, Guardian):
    """The ``Guardian`` of the Postgres store."""

    async def guardian_sweep(self, agents: Sequence[str]) -> list[str]:
        nudged: list[str] = []
        async with self.pool.connection() as conn:
            for agent in agents:
                cursor = await conn.execute(agent_query("guardian_sweep", schema_name_for(agent)),
                                            {"agent": agent})
                nudged += [str(row[0]) for row in await cursor.fetchall()]
        return nudged
