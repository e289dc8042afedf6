"""The ``FleetReader`` of the Postgres store: a few aggregate reads for operators."""

from __future__ import annotations

from collections.abc import Sequence

from toren.plugin.drivers import FleetGauges, FleetReader, QueueGauge, RunInFlight, schema_name_for
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query, query


class PostgresFleetReader(PostgresConnection, FleetReader):
    """Queue and worker gauges from ``toren_control``; runs from each agent's schema."""

    async def fleet_gauges(self, agents: Sequence[str], live_window_s: float) -> FleetGauges:
        queue: dict[str, QueueGauge] = {}
        dead: dict[str, int] = {}
        active: dict[str, dict[str, int]] = {}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("fleet_queue"), {"agents": list(agents)})
            for (agent, ready, in_flight, delayed, oldest, dead_count,
                 waiting_slot) in await cursor.fetchall():
                queue[agent] = QueueGauge(ready, in_flight, delayed, float(oldest),
                                          waiting_concurrency=waiting_slot)
                dead[agent] = dead_count
            cursor = await conn.execute(query("fleet_workers"), {"max_age_s": live_window_s})
            workers = {str(version): count for version, count in await cursor.fetchall()}
            for agent in agents:
                cursor = await conn.execute(
                    agent_query("fleet_active_runs", schema_name_for(agent)))
                active[agent] = {status: count for status, count in await cursor.fetchall()}
        return FleetGauges(queue=queue, dead_letters=dead, active_runs=active,
                           workers_by_version=workers)

    async def agent_lanes(self) -> dict[str, str]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("agent_lanes"))
            return {name: lane for name, lane in await cursor.fetchall()}

    async def runs_in_flight(self, agents: Sequence[str], limit: int) -> list[RunInFlight]:
        found: list[RunInFlight] = []
        async with self.pool.connection() as conn:
            for agent in agents:
                cursor = await conn.execute(
                    agent_query("runs_in_flight", schema_name_for(agent)), {"limit": limit})
                found += [RunInFlight(run_id, agent, status, created, updated, step, tasks,
                                      error)
                          for run_id, status, created, updated, error, step, tasks
                          in await cursor.fetchall()]
        found.sort(key=lambda run: run.created_at)
        return found[:limit]
