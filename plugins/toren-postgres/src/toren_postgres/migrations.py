"""Numbered SQL migrations, applied at boot under an advisory lock (DBOS's run_migrations shape).

Two scopes: ``control`` (the shared ``toren_control`` schema) and one per agent schema
(``agent_<name>``), whose files are applied with ``search_path`` set to that schema.
Fast path when everything is current; otherwise a session advisory lock on an autocommit
connection, then each migration and its ledger row in one transaction. Additive only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from toren.plugin import ConfigError, MigrationError
from toren.plugin.drivers import AgentSchema, Migration, Migrator
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import query

CONTROL_SCOPE = "control"
#: Arbitrary but fixed: every Toren process contends for the same lock ("toren" in ASCII).
MIGRATION_LOCK_KEY = 0x746F72656E
REGISTRATION_LOCK_KEY = 0x746F72656E_616772  # "toren" "agr"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@cache
def _read(folder: str) -> tuple[tuple[int, str, str], ...]:
    files = resources.files("toren_postgres").joinpath("sql", folder)
    found = []
    for entry in files.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return tuple(sorted(found))


def control_migrations() -> list[Migration]:
    return [Migration(CONTROL_SCOPE, v, n, s) for v, n, s in _read("migrations")]


def agent_migrations(schema_name: str) -> list[Migration]:
    return [Migration(schema_name, v, n, s) for v, n, s in _read("agent_migrations")]


def all_migrations(agents: Sequence[AgentSchema]) -> list[Migration]:
    found = control_migrations()
    for agent in agents:
        found += agent_migrations(agent.schema_name)
    return found


async def applied(conn: psycopg.AsyncConnection) -> set[tuple[str, int]]:
    cursor = await conn.execute(query("ledger_exists"))
    row = await cursor.fetchone()
    if not row or not row[0]:
        return set()
    cursor = await conn.execute(query("applied_versions"))
    return {(scope, version) for scope, version in await cursor.fetchall()}


async def pending(conn: psycopg.AsyncConnection, agents: Sequence[AgentSchema]) -> list[Migration]:
    done = await applied(conn)
    return [m for m in all_migrations(agents) if (m.scope, m.version) not in done]


async def migrate(conn: psycopg.AsyncConnection, agents: Sequence[AgentSchema],
                  lock_timeout_s: float = 60.0) -> list[Migration]:
    """Apply what is pending and register ``agents``; return the migrations applied.

    ``conn`` must be in autocommit mode. Raises ``MigrationError`` if the lock is not had
    within ``lock_timeout_s``, the role lacks privileges, or a migration fails (that migration
    is rolled back whole).
    """
    try:
        return await _migrate(conn, agents, lock_timeout_s)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise MigrationError(
            f"the database role cannot set up Toren's schemas: {exc.diag.message_primary}. "
            "It needs CONNECT and CREATE on the database "
            "(GRANT CONNECT, CREATE ON DATABASE <db> TO <role>)") from None


async def _migrate(conn: psycopg.AsyncConnection, agents: Sequence[AgentSchema],
                   lock_timeout_s: float) -> list[Migration]:
    todo = await pending(conn, agents)
    applied_now: list[Migration] = []
    if todo:
        await _lock(conn, lock_timeout_s)
        try:
            await conn.execute(query("bootstrap_ledger"))
            todo = await pending(conn, agents)  # another process may have done it meanwhile
            control = [m for m in todo if m.scope == CONTROL_SCOPE]
            for migration in control:
                await _apply(conn, migration)
            await check_owners(conn, agents)
            for migration in (m for m in todo if m.scope != CONTROL_SCOPE):
                await _apply(conn, migration)
            applied_now = todo
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
    await register_agents(conn, agents)
    return applied_now


async def _lock(conn: psycopg.AsyncConnection, timeout_s: float) -> None:
    # lock_timeout bounds the wait for the advisory lock too; without it a stuck migration
    # elsewhere would hang every booting process forever.
    await conn.execute(sql.SQL("SET lock_timeout = {}").format(
        sql.Literal(f"{int(timeout_s * 1000)}ms")))
    try:
        await conn.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
    except psycopg.errors.LockNotAvailable as exc:
        raise MigrationError(
            f"another process has held the migration lock for more than {timeout_s:g}s; "
            "is a migration stuck? (see pg_locks for advisory lock "
            f"{MIGRATION_LOCK_KEY})") from exc
    finally:
        await conn.execute("RESET lock_timeout")


async def _apply(conn: psycopg.AsyncConnection, migration: Migration) -> None:
    try:
        async with conn.transaction():
            if migration.scope != CONTROL_SCOPE:
                schema = sql.Identifier(migration.scope)
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema))
            await conn.execute(migration.sql.encode())
            await conn.execute(query("record_migration"), {
                "scope": migration.scope, "version": migration.version, "name": migration.name})
    except psycopg.errors.InsufficientPrivilege:
        raise
    except psycopg.Error as exc:
        raise MigrationError(
            f"migration {migration.scope}/{migration.version:04d}_{migration.name} failed and "
            f"was rolled back: {exc}") from exc


async def check_owners(conn: psycopg.AsyncConnection, agents: Sequence[AgentSchema]) -> None:
    """Refuse an agent whose schema already belongs to a differently named agent."""
    for agent in agents:
        cursor = await conn.execute(query("agent_owner"), {"schema_name": agent.schema_name})
        row = await cursor.fetchone()
        if row and row[0] != agent.name:
            raise ConfigError(
                f"agent {agent.name!r} ({agent.directory}) maps to the database schema "
                f"{agent.schema_name}, which already belongs to agent {row[0]!r} in this "
                "database; rename one of them (name: in agent.yaml)")


async def register_agents(conn: psycopg.AsyncConnection, agents: Sequence[AgentSchema]) -> None:
    """Record ``agents`` in ``toren_control.agents`` (insert or update), all or none.

    Processes booting together register the same agents. ``ON CONFLICT (schema_name)`` does not
    stop two first inserts racing from failing on the other unique key (the name), so
    registrations take turns under a transaction lock of their own; it is not the migration
    lock, so a boot with nothing to migrate never waits behind another's long migration.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [REGISTRATION_LOCK_KEY])
        await check_owners(conn, agents)
        for agent in agents:
            await _register(conn, agent)


async def _register(conn: psycopg.AsyncConnection, agent: AgentSchema) -> None:
    await conn.execute(query("register_agent"), {
        "schema_name": agent.schema_name, "name": agent.name,
        "directory": str(agent.directory), "model": agent.model,
        "accepts_from": list(getattr(agent, "accepts_from", ())),
        # its notify: (completion webhooks), read by the runs tables' trigger
        "notify": Jsonb([sub.to_json() for sub in getattr(agent, "notify", ())]),
        # its lane (runtime:), so toren top anywhere says which lane its runs wait for
        "runtime": getattr(agent, "runtime", "short"),
        # its concurrency: limit (0: none), read by the queue's claim
        "concurrency_limit": getattr(getattr(agent, "concurrency", None), "limit", 0)})


def render(migrations: Sequence[Migration]) -> str:
    """SQL of ``migrations`` as one script a DBA can read or run (``toren db migrate --print``)."""
    parts = []
    for m in migrations:
        header = f"-- {m.scope} {m.version:04d}_{m.name}\n"
        if m.scope != CONTROL_SCOPE:
            header += f"CREATE SCHEMA IF NOT EXISTS {m.scope};\nSET search_path TO {m.scope};\n"
        record = (f"INSERT INTO toren_control.migrations (scope, version, name) "
                  f"VALUES ('{m.scope}', {m.version}, '{m.name}');\n")
        parts.append(f"BEGIN;\n{header}{m.sql.strip()}\n{record}COMMIT;\n")
    return query("bootstrap_ledger") + "\n\n" + "\n".join(parts)


async def registered_agents(pool: AsyncConnectionPool) -> dict[str, str]:
    """Agent name -> schema of every agent registered in the database."""
    async with pool.connection() as conn:
        cursor = await conn.execute(query("registered_agents"))
        return {name: schema for name, schema in await cursor.fetchall()}


class PostgresMigrator(PostgresConnection, Migrator):
    """The ``Migrator`` of the Postgres store: the files above, the ledger, the lock."""

    async def pending_migrations(self, agents: Sequence[AgentSchema]) -> list[Migration]:
        async with self.pool.connection() as conn:
            return await pending(conn, agents)

    async def migrate(self, agents: Sequence[AgentSchema]) -> list[Migration]:
        async with self.pool.connection() as conn:
            return await migrate(conn, agents)

    def render_migrations(self, migrations: Sequence[Migration]) -> str:
        return render(migrations)

    async def registered_agents(self) -> dict[str, str]:
        return await registered_agents(self.pool)

    async def accepted_callers(self, name: str) -> list[str] | None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("agent_consent"), {"name": name})
            row = await cursor.fetchone()
        if row is None:
            return None
        return list(row[0] or [])
