"""The ``AgentVersionStore`` of the Postgres store: definition files by SHA-256, versions by
hash, and ``runs.agent_version`` (agent migration ``0010_agent_versions``)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from functools import cache
from importlib import resources

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin import LeaseLost, Settings
from toren.plugin.drivers import (
    AgentVersion,
    AgentVersionStore,
    NewEvent,
    VersionSummary,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import parse_queries
from toren_postgres.runs import _events_json


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/versions.sql").read_text("utf-8")
    return parse_queries(text)


@cache
def version_query(name: str, schema: str) -> sql.Composed:
    """A query of ``sql/versions.sql`` bound to one agent's schema (cached)."""
    return sql.SQL(_queries()[name]).format(
        runs=sql.Identifier(schema, "runs"), events=sql.Identifier(schema, "events"),
        agent_versions=sql.Identifier(schema, "agent_versions"),
        definition_files=sql.Identifier(schema, "definition_files"))


class PostgresAgentVersionStore(PostgresConnection, AgentVersionStore):
    """Agent versions in each agent's schema."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        #: Versions this process kept (or found kept), by agent and hash.
        self._kept_versions: set[tuple[str, str]] = set()

    async def save_agent_version(self, agent: str, version: AgentVersion) -> None:
        if (agent, version.hash) in self._kept_versions:
            return
        schema = schema_name_for(agent)
        files = [{"sha256": digest, "base64": base64.b64encode(version.files[path]).decode()}
                 for path, digest in version.manifest.items()]
        async with self.pool.connection() as conn, conn.transaction():
            # files first, then the version that names them: a reader never finds a version
            # whose files are not all there
            await conn.execute(version_query("save_definition_files", schema),
                               {"files": Jsonb(files)})
            await conn.execute(version_query("save_agent_version", schema), {
                "hash": version.hash, "human_version": version.human,
                "files": Jsonb(version.manifest)})
        self._kept_versions.add((agent, version.hash))

    async def load_agent_version(self, agent: str, version_hash: str) -> AgentVersion | None:
        schema = schema_name_for(agent)
        async with self.pool.connection() as conn:
            cursor = await conn.execute(version_query("load_agent_version", schema),
                                        {"hash": version_hash})
            rows = await cursor.fetchall()
        if not rows:
            return None
        files = {path: bytes(data) for _human, path, data in rows}
        version = AgentVersion.of(files, rows[0][0])
        if version.hash != version_hash:  # a file row is missing or altered: refuse it
            return None
        return version

    async def run_agent_version(self, agent: str, run_id: str) -> tuple[bool, str | None]:
        async with self.pool.connection() as conn:
            try:
                cursor = await conn.execute(
                    version_query("run_agent_version", schema_name_for(agent)),
                    {"run_id": run_id})
            except psycopg.DataError:
                return False, None  # not a UUID
            row = await cursor.fetchone()
        return (False, None) if row is None else (True, row[0])

    async def set_run_version(self, agent: str, run_id: str, expected: str | None,
                              events: Sequence[NewEvent]) -> bool:
        statement = version_query("set_run_version", schema_name_for(agent))
        params = {"run_id": run_id, "expected": expected, "events": _events_json(events)}
        for _ in range(20):
            try:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(statement, params)
                    return bool(await cursor.fetchall())
            except psycopg.errors.UniqueViolation:
                continue  # the orchestrator took that sequence number; take the next one
        raise LeaseLost(f"could not record the version of run {run_id}: its log kept moving")

    async def list_agent_versions(self, agent: str) -> list[VersionSummary]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(version_query("list_agent_versions", schema_name_for(agent)))
            rows = await cursor.fetchall()
        return [VersionSummary(hash=row["hash"], human_version=row["human_version"],
                               first_seen=row["first_seen"], runs=int(row["runs"]),
                               active_runs=int(row["active_runs"]), files=dict(row["files"]))
                for row in rows]
