"""Pytest fixtures for real-Postgres tests (a ``pytest11`` plugin of toren-postgres).

- ``postgres_server_url`` (session): ``TOREN_TEST_DATABASE_URL`` if set (any server where the
  role may CREATE DATABASE), else an embedded Postgres started in a temporary directory.
- ``toren_template_database`` (session): a database with the control schema migrated, the
  template of every per-test database.
- ``database_url`` (function): a fresh database copied from the template (fast), dropped after.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

ENV_VAR = "TOREN_TEST_DATABASE_URL"


def database_url_for(server_url: str, dbname: str, **params: str) -> str:
    """``server_url`` pointed at another database (and optionally another user)."""
    return make_conninfo(server_url, dbname=dbname, **params)


def create_database(server_url: str, name: str, *, template: str | None = None) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        conn.execute(statement)
    return database_url_for(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """A Postgres server URL whose role may create databases."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        yield configured
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning at import
        from pgserver.postgres_server import get_server
    # Not under pytest's tmp_path: pytest deletes old base temp dirs when other sessions
    # start, which would pull the data directory from under a running server.
    base = Path(tempfile.mkdtemp(prefix="toren-test-postgres-"))
    server = get_server(base / "pgdata", cleanup_mode="delete")
    try:
        yield server.get_uri("postgres")
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def toren_template_database(postgres_server_url: str) -> Iterator[str]:
    """Name of a database holding the migrated control schema (no agent schemas)."""
    import asyncio

    from toren_postgres.migrations import migrate

    name = f"toren_template_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    url = create_database(postgres_server_url, name)

    async def apply() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        async with conn:
            await migrate(conn, [])

    asyncio.run(apply())
    try:
        yield name
    finally:
        drop_database(postgres_server_url, name)


@pytest.fixture
def database_url(postgres_server_url: str, toren_template_database: str) -> Iterator[str]:
    """A fresh database for one test, with the control schema already migrated."""
    name = f"toren_test_{uuid.uuid4().hex[:12]}"
    url = create_database(postgres_server_url, name, template=toren_template_database)
    try:
        yield url
    finally:
        drop_database(postgres_server_url, name)
