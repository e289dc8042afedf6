"""The ``RunReader`` in Postgres: runs and events of every agent schema, read without a lease."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from toren.plugin import Settings
from toren.plugin.drivers import (
    Event,
    ModelCosts,
    Period,
    RunReader,
    RunRecord,
    RunSearch,
    RunTotals,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.migrations import registered_agents
from toren_postgres.notices import AppendNotices
from toren_postgres.pipelines import one_transaction
from toren_postgres.queries import agent_query, query
from toren_postgres.run_search import search_statement


def _record(agent: str, row: dict[str, Any]) -> RunRecord:
    return RunRecord(agent=agent, **{**row, "id": str(row["id"])})


async def find_run(pool: AsyncConnectionPool, run_id: str,
                   agent: str | None = None) -> RunRecord | None:
    """One run, in ``agent``'s schema or, if ``None``, in every registered agent's."""
    agents = [agent] if agent else list(await registered_agents(pool))
    for name in agents:
        async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            try:
                await cursor.execute(agent_query("get_run", schema_name_for(name)),
                                     {"run_id": run_id})
            except psycopg.DataError:
                return None  # not a UUID (or not even text Postgres can take)
            row = await cursor.fetchone()
        if row is not None:
            return _record(name, row)
    return None


class PostgresRunReader(PostgresConnection, RunReader):
    """The ``RunReader`` of the Postgres store: one query per agent schema it reads; appends
    to watched runs are noticed through one LISTEN connection (``notices``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._notices: AppendNotices | None = None

    async def close(self) -> None:
        if self._notices is not None:
            await self._notices.close()
            self._notices = None
        await super().close()

    async def wait_for_appends(self, run_ids: Collection[str],
                               timeout_s: float) -> set[str] | None:
        if self._notices is None:
            if self.url is None:
                raise RuntimeError("PostgresRunReader.open() has not been awaited")
            self._notices = AppendNotices(self.url, self.pool, self.settings.connect_timeout_s)
        return await self._notices.wait(run_ids, timeout_s)

    async def get_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        return await find_run(self.pool, run_id, agent)

    async def queue_state(self, agent: str, run_id: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("run_queue_state"),
                                        {"agent": agent, "run_id": run_id})
            row = await cursor.fetchone()
        assert row is not None
        priority, key, executing, ready, delayed, limit, busy = row
        waiting = (None if executing else
                   "concurrency" if ready and limit and busy >= limit else
                   "queued" if ready else "delayed" if delayed else None)
        return {"priority": priority, "concurrency_key": key, "waiting": waiting}

    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, agents: Sequence[str] | None = None,
                        before: tuple[datetime, str] | None = None,
                        kind: str | None = None, schedule: str | None = None
                        ) -> list[RunRecord]:
        # an agent that never ran here has no tables: no runs, not an SQL error
        names = await self._agents_of([agent] if agent else agents or ())
        params = {"status": status, "limit": limit, "kind": kind, "schedule": schedule,
                  "before_at": before[0] if before else None,
                  "before_id": before[1] if before else None}
        found: list[RunRecord] = []
        for name in names:
            async with (self.pool.connection() as conn,
                        conn.cursor(row_factory=dict_row) as cursor):
                await cursor.execute(agent_query("list_runs", schema_name_for(name)), params)
                rows = await cursor.fetchall()
            found += [_record(name, row) for row in rows]
        found.sort(key=lambda run: (run.created_at is not None, run.created_at, run.id),
                   reverse=True)
        return found[:limit]

    async def search_runs(self, search: RunSearch) -> list[RunRecord]:
        names = await self._agents_of(search.agents)
        # one agent: its page straight from Postgres; several: each one's first offset+limit
        # runs, merged in the sort's order (ties newest first) and cut to the page
        single = len(names) == 1
        found: list[tuple[RunRecord, Any]] = []  # the run, its sort key (a number or NULL)
        for name in names:
            statement, params = search_statement(
                schema_name_for(name), search, search.limit + (0 if single else search.offset),
                search.offset if single else 0)
            async with (self.pool.connection() as conn,
                        conn.cursor(row_factory=dict_row) as cursor):
                await cursor.execute(statement, params)
                rows = await cursor.fetchall()
            for row in rows:
                key = row.pop("sort_key")
                found.append((_record(name, row), key))
        if single:
            return [record for record, _key in found]
        found.sort(key=lambda pair: (pair[0].created_at is not None, pair[0].created_at,
                                     pair[0].id), reverse=True)
        present = [(record, float(key)) for record, key in found if key is not None]
        present.sort(key=lambda pair: pair[1], reverse=search.descending)
        ordered = present + [pair for pair in found if pair[1] is None]
        return [record for record, _key in ordered[search.offset:search.offset + search.limit]]

    async def run_totals(self, agent: str, run_ids: Sequence[str]) -> dict[str, RunTotals]:
        if not run_ids or agent not in await registered_agents(self.pool):
            return {}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(agent_query("run_totals", schema_name_for(agent)),
                                        {"run_ids": list(run_ids)})
            rows = await cursor.fetchall()
        return {run_id: RunTotals(calls, steps, cost, unknown)
                for run_id, calls, steps, cost, unknown in rows}

    async def _agents_of(self, agents: Sequence[str]) -> list[str]:
        """The agents of ``agents`` that have tables here (every registered one for none)."""
        registered = await registered_agents(self.pool)
        return [name for name in agents if name in registered] if agents else list(registered)

    async def fork_runs(self, agent: str, run_id: str) -> list[RunRecord]:
        if agent not in await registered_agents(self.pool):
            return []
        async with (self.pool.connection() as conn,
                    conn.cursor(row_factory=dict_row) as cursor):
            try:
                await cursor.execute(agent_query("fork_runs", schema_name_for(agent)),
                                     {"run_id": run_id})
            except psycopg.DataError:
                return []  # not a UUID
            return [_record(agent, row) for row in await cursor.fetchall()]

    async def costs(self, agents: Sequence[str], since: datetime, until: datetime,
                    period: Period) -> list[ModelCosts]:
        registered = set(await registered_agents(self.pool))
        # whole UTC days: the service's windows start and end on periods' starts
        params = {"period": period, "since": since.astimezone(UTC).date(),
                  "until": until.astimezone(UTC).date()}
        found: list[ModelCosts] = []
        for name in agents:
            if name not in registered:
                continue  # never ran here: no tables, no calls
            async with self.pool.connection() as conn:
                cursor = await conn.execute(agent_query("model_costs", schema_name_for(name)),
                                            params)
                rows = await cursor.fetchall()
            found += [ModelCosts(name, model or "", bucket, calls, cost, unknown, tokens_in,
                                 tokens_out)
                      for bucket, model, calls, cost, unknown, tokens_in, tokens_out in rows]
        return found

    async def child_runs(self, run_id: str) -> list[RunRecord]:
        found: list[RunRecord] = []
        for name in await registered_agents(self.pool):
            async with (self.pool.connection() as conn,
                        conn.cursor(row_factory=dict_row) as cursor):
                try:
                    await cursor.execute(agent_query("child_runs", schema_name_for(name)),
                                         {"run_id": run_id})
                except psycopg.DataError:
                    return []  # not a UUID
                found += [_record(name, row) for row in await cursor.fetchall()]
        found.sort(key=lambda run: (run.created_at is not None, run.created_at, run.id))
        return found

    async def load_events(self, agent: str, run_id: str,
                          after: Mapping[str, int] | None = None) -> list[Event]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(agent_query("load_events", schema_name_for(agent)),
                                        {"run_id": run_id, "after": Jsonb(dict(after or {}))})
            rows = await cursor.fetchall()
        return [Event(run_id, stream, seq, kind, data, at) for stream, seq, kind, data, at in rows]

    async def get_run_and_events(self, agent: str, run_id: str,
                                 after: Mapping[str, int] | None = None
                                 ) -> tuple[RunRecord | None, list[Event]]:
        found = await self.get_runs_and_events(agent, {run_id: after or {}})
        return found[run_id]

    async def get_runs_and_events(self, agent: str,
                                  positions: Mapping[str, Mapping[str, int]]
                                  ) -> dict[str, tuple[RunRecord | None, list[Event]]]:
        if not positions:
            return {}
        schema = schema_name_for(agent)
        run_ids = list(positions)
        async with self.pool.connection() as conn:
            # one round trip, the events statement after the rows' (as get_run_and_events)
            async with one_transaction(conn):
                runs = conn.cursor(row_factory=dict_row)
                await runs.execute(agent_query("get_runs", schema), {"run_ids": run_ids})
                events = await conn.execute(agent_query("load_events_of_runs", schema), {
                    "run_ids": run_ids,
                    "after": Jsonb({run_id: dict(after) for run_id, after in positions.items()})})
            rows = await runs.fetchall()
            event_rows = await events.fetchall()
        found: dict[str, tuple[RunRecord | None, list[Event]]] = {
            run_id: (None, []) for run_id in run_ids}
        for row in rows:
            key = row.pop("key")  # the run id as the caller wrote it
            found[key] = (_record(agent, row), [])
        for key, run_id, stream, seq, kind, data, at in event_rows:
            row_found, listed = found.get(key, (None, []))
            if row_found is not None:
                listed.append(Event(run_id, stream, seq, kind, data, at))
        return found

    async def load_stream(self, agent: str, run_id: str, stream: str) -> list[Event]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(agent_query("load_stream", schema_name_for(agent)),
                                        {"run_id": run_id, "stream": stream})
            rows = await cursor.fetchall()
        return [Event(run_id, stream, seq, kind, data, at) for seq, kind, data, at in rows]
