"""The ``AuditStore`` in Postgres: ``toren_control.audit`` (control migration 0022)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin.drivers import AuditEntry, AuditQuery, AuditRecord, AuditStore
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import parse_queries

#: Rows one statement of ``forget_audit`` deletes.
FORGET_BATCH = 5000


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/audit.sql").read_text("utf-8")
    return parse_queries(text)


class PostgresAuditStore(PostgresConnection, AuditStore):
    """The ``AuditStore`` of the Postgres store."""

    async def record_audit(self, entry: AuditEntry) -> AuditRecord:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["record_audit"], {
                "actor_kind": entry.actor_kind, "actor_id": entry.actor_id,
                "actor_name": entry.actor_name, "source": entry.source,
                "remote": entry.remote, "user_agent": entry.user_agent,
                "action": entry.action, "agent": entry.agent, "run_id": entry.run_id,
                "target": entry.target, "outcome": entry.outcome, "status": entry.status,
                "details": Jsonb(entry.details)})
            row = await cursor.fetchone()
        assert row is not None
        return AuditRecord(int(row[0]), row[1], entry)

    async def list_audit(self, query: AuditQuery) -> list[AuditRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(_queries()["list_audit"], {
                "before": query.before, "actor": query.actor, "action": query.action,
                "agent": query.agent, "run_id": query.run_id, "outcome": query.outcome,
                "since": query.since, "until": query.until, "limit": query.limit})
            return [_record(row) for row in await cursor.fetchall()]

    async def forget_audit(self, older_than_s: float) -> int:
        forgotten = 0
        while True:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(_queries()["forget_audit"], {
                    "older_than_s": older_than_s, "batch": FORGET_BATCH})
                forgotten += cursor.rowcount
            if cursor.rowcount < FORGET_BATCH:
                return forgotten


def _record(row: dict[str, Any]) -> AuditRecord:
    at, record_id = row.pop("at"), row.pop("id")
    return AuditRecord(int(record_id), at, AuditEntry(**row))
