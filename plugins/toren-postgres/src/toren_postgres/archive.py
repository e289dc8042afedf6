"""The ``RunArchiveIndex`` in Postgres: each agent schema's ``archived_runs`` (agent migration
0011), batched purges of the hot tables, and one session advisory lock for the whole fleet."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Json, Jsonb

from toren.plugin import ArchiveMismatch, RestoreConflict
from toren.plugin.drivers import (
    ArchiveDigest,
    Event,
    RunArchiveIndex,
    RunRecord,
    record_from_row,
    run_row,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.migrations import registered_agents
from toren_postgres.queries import parse_queries

#: The fleet's archive lock ("toren-ar" in ASCII): one archive pass at a time per database.
ARCHIVE_LOCK_KEY = 0x746F72656E2D6172


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/archive_queries.sql")
    return parse_queries(text.read_text("utf-8"))


@cache
def archive_query(name: str, schema: str) -> sql.Composed:
    """A named query of ``sql/archive_queries.sql`` bound to one agent's schema (cached)."""
    return sql.SQL(_queries()[name]).format(
        runs=sql.Identifier(schema, "runs"), events=sql.Identifier(schema, "events"),
        tool_manifests=sql.Identifier(schema, "tool_manifests"),
        archived_runs=sql.Identifier(schema, "archived_runs"))


def _archived(agent: str, row: dict[str, Any]) -> RunRecord:
    archive = {"location": row["location"], "archived_at": row["archived_at"].isoformat(),
               "summary": row["summary"], "sha256": row["sha256"]}
    digest = None if row["sha256"] is None else ArchiveDigest(
        row["sha256"], row["object_bytes"], row["content_bytes"])
    return record_from_row({**row["record"], "agent": agent},
                           {"archive": archive, "archive_digest": digest})


def _record(agent: str, row: dict[str, Any]) -> RunRecord:
    return RunRecord(agent=agent, **{**row, "id": str(row["id"])})


class PostgresRunArchive(PostgresConnection, RunArchiveIndex):
    """The ``RunArchiveIndex`` of the Postgres store."""

    @contextlib.asynccontextmanager
    async def archive_lock(self) -> AsyncIterator[bool]:
        # a session lock on a connection held for the pass: it goes with the connection if
        # this process dies, so a crashed leader never blocks the next one
        async with self.pool.connection() as conn:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", [ARCHIVE_LOCK_KEY])
            row = await cursor.fetchone()
            held = bool(row and row[0])
            try:
                yield held
            finally:
                if held:
                    await conn.execute("SELECT pg_advisory_unlock(%s)", [ARCHIVE_LOCK_KEY])

    async def archivable_runs(self, agent: str, older_than_s: float, limit: int,
                              after: tuple[datetime, str] | None = None) -> list[RunRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(archive_query("archivable_runs", schema_name_for(agent)), {
                "agent": agent, "older_than_s": older_than_s, "limit": limit,
                "after_at": after[0] if after else None, "after_id": after[1] if after else None})
            return [_record(agent, row) for row in await cur.fetchall()]

    async def export_run(self, agent: str, run_id: str
                         ) -> tuple[RunRecord, list[Event], list[dict[str, Any]]] | None:
        schema = schema_name_for(agent)
        # one snapshot for the row, the events and the manifests
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(archive_query("export_run", schema), {"run_id": run_id})
                row = await cur.fetchone()
                if row is None:
                    return None
                await cur.execute(archive_query("export_tool_manifests", schema),
                                  {"run_id": run_id})
                manifests = [{**m, "created_at": m["created_at"].isoformat()}
                             for m in await cur.fetchall()]
            cursor = await conn.execute(archive_query("export_events", schema),
                                        {"run_id": run_id})
            events = [Event(run_id, stream, seq, kind, data, at)
                      for stream, seq, kind, data, at in await cursor.fetchall()]
        return _record(agent, row), events, manifests

    async def index_archived_run(self, agent: str, record: RunRecord, location: str,
                                 summary: dict[str, Any], events: int,
                                 digest: ArchiveDigest | None) -> bool:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                archive_query("index_archived_run", schema_name_for(agent)),
                {"run_id": record.id, "location": location, "record": Jsonb(run_row(record)),
                 "summary": Jsonb(summary), "events": events,
                 "sha256": digest.sha256 if digest else None,
                 "object_bytes": digest.object_bytes if digest else None,
                 "content_bytes": digest.content_bytes if digest else None})
            return await cursor.fetchone() is not None

    async def purge_archived_run(self, agent: str, run_id: str, batch_size: int) -> int:
        schema = schema_name_for(agent)
        deleted = 0
        while True:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(archive_query("purge_events_batch", schema),
                                            {"run_id": run_id, "batch": batch_size})
            deleted += cursor.rowcount
            if cursor.rowcount < batch_size:
                break
        async with self.pool.connection() as conn:
            await conn.execute(archive_query("purge_run", schema), {"run_id": run_id})
        return deleted

    async def unpurged_runs(self, agent: str, limit: int) -> list[str]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(archive_query("unpurged_runs", schema_name_for(agent)),
                                        {"limit": limit})
            return [row[0] for row in await cursor.fetchall()]

    async def archived_run(self, run_id: str,
                           agents: Sequence[str] | None = None) -> RunRecord | None:
        names = list(agents) if agents is not None else list(await registered_agents(self.pool))
        for name in names:
            async with (self.pool.connection() as conn,
                        conn.cursor(row_factory=dict_row) as cur):
                try:
                    await cur.execute(archive_query("archived_run", schema_name_for(name)),
                                      {"run_id": run_id})
                except psycopg.DataError:
                    return None  # not a UUID
                except psycopg.errors.UndefinedTable:
                    continue  # an agent schema not migrated to 0011 yet
                row = await cur.fetchone()
            if row is not None:
                return _archived(name, row)
        return None

    async def list_archived_runs(self, *, agents: Sequence[str] | None = None,
                                 limit: int = 50,
                                 before: tuple[datetime, str] | None = None
                                 ) -> list[RunRecord]:
        names = list(agents) if agents is not None else list(await registered_agents(self.pool))
        params = {"limit": limit, "before_at": before[0] if before else None,
                  "before_id": before[1] if before else None}
        found: list[RunRecord] = []
        for name in names:
            async with (self.pool.connection() as conn,
                        conn.cursor(row_factory=dict_row) as cur):
                try:
                    await cur.execute(archive_query("list_archived_runs",
                                                    schema_name_for(name)), params)
                except psycopg.errors.UndefinedTable:
                    continue
                found += [_archived(name, row) for row in await cur.fetchall()]
        found.sort(key=lambda run: (run.created_at is not None, run.created_at, run.id),
                   reverse=True)
        return found[:limit]

    async def restore_archived_run(self, agent: str, record: RunRecord,
                                   events: Sequence[Event],
                                   tool_manifests: Sequence[dict[str, Any]]) -> bool:
        schema = schema_name_for(agent)
        row = {k: v for k, v in run_row(record).items() if k != "agent"}
        try:
            async with self.pool.connection() as conn, conn.transaction():
                cursor = await conn.execute(archive_query("unindex_archived_run", schema),
                                            {"run_id": record.id})
                if await cursor.fetchone() is None:
                    return False
                await conn.execute(archive_query("clear_hot_run", schema),
                                   {"run_id": record.id})
                await conn.execute(archive_query("restore_run", schema), {"row": Jsonb(row)})
                await conn.execute(archive_query("restore_events", schema), {
                    "run_id": record.id,
                    "events": Json([{"stream": e.stream, "seq": e.seq, "type": e.type,
                                     "data": e.data, "created_at": e.created_at.isoformat()
                                     if e.created_at else None} for e in events])})
                await conn.execute(archive_query("restore_tool_manifests", schema),
                                   {"run_id": record.id,
                                    "manifests": Jsonb(list(tool_manifests))})
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "runs_idempotency_key_key":
                raise _refused(record, exc) from exc
            # a run started with the same key after this one left the hot tables
            raise RestoreConflict(f"run {record.id} was not restored: its idempotency key "
                                  f"{record.idempotency_key!r} is now held by another run of "
                                  f"{agent!r}; it stays archived") from exc
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
            raise _refused(record, exc) from exc
        return True

    async def hot_table_sizes(self, agents: Sequence[str]) -> dict[str, dict[str, int]]:
        sizes: dict[str, dict[str, int]] = {}
        async with self.pool.connection() as conn:
            for agent in agents:
                cursor = await conn.execute(_queries()["table_sizes"],
                                            {"schema": schema_name_for(agent)})
                entry: dict[str, int] = {}
                for name, rows, size in await cursor.fetchall():
                    entry[f"{name}_rows"] = int(rows)
                    entry[f"{name}_bytes"] = int(size)
                sizes[agent] = entry
        return sizes


def _refused(record: RunRecord, exc: psycopg.Error) -> ArchiveMismatch:
    # the transaction rolled back: the run is archived as before, nothing is hot
    return ArchiveMismatch(f"run {record.id} was not restored: Postgres refuses what its "
                           f"archive object holds ({exc.diag.message_primary or exc}); it stays "
                           "archived")
