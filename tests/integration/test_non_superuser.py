"""The database role Toren needs: LOGIN plus CONNECT and CREATE on one database, nothing more."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from toren_postgres.testing import database_url_for

from tests.conftest import TorenCli, one_line
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)


def grant(server_url: str, database: str, role: str, privileges: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT {} ON DATABASE {} TO {}").format(
            sql.SQL(privileges), sql.Identifier(database), sql.Identifier(role)))


def test_migrate_as_a_role_with_connect_and_create(
        postgres_server_url: str, empty_database: tuple[str, str],
        make_role: Callable[[], str], toren_cli: TorenCli, tmp_path: Path) -> None:
    database, admin_url = empty_database
    role = make_role()
    grant(postgres_server_url, database, role, "CONNECT, CREATE")
    url = database_url_for(postgres_server_url, database, user=role)
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                       env={"DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    assert {m["scope"] for m in json.loads(result.stdout)["applied"]} == {"control",
                                                                         "agent_crew"}

    with psycopg.connect(admin_url) as conn:
        owners = conn.execute(
            "SELECT n.nspname, c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN ('toren_control', 'agent_crew') AND c.relkind = 'r'").fetchall()
        schema_owners = dict(conn.execute(
            "SELECT nspname, pg_get_userbyid(nspowner) FROM pg_namespace "
            "WHERE nspname IN ('toren_control', 'agent_crew')").fetchall())
    assert {(schema, table) for schema, table, _ in owners} >= {
        ("toren_control", "migrations"), ("toren_control", "agents"),
        ("agent_crew", "runs"), ("agent_crew", "events")}
    assert {owner for _, _, owner in owners} == {role}
    assert schema_owners == {"toren_control": role, "agent_crew": role}

    again = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                      env={"DATABASE_URL": url})
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["applied"] == []


def test_role_without_create_gets_a_one_line_error(
        postgres_server_url: str, empty_database: tuple[str, str],
        make_role: Callable[[], str], toren_cli: TorenCli, tmp_path: Path) -> None:
    database, admin_url = empty_database
    role = make_role()
    grant(postgres_server_url, database, role, "CONNECT")
    url = database_url_for(postgres_server_url, database, user=role)
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                       env={"DATABASE_URL": url})

    # BUG (plugins/toren-postgres/src/toren_postgres/migrations.py, migrate): the
    # bootstrap_ledger query runs outside _apply's error translation, so the role's
    # InsufficientPrivilege escapes as a raw psycopg error and the CLI prints a traceback.
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("Error: ")
    assert "CREATE" in line and "GRANT" in line  # says what to grant
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "migration_error"
    with psycopg.connect(admin_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = "
                            "'toren_control'").fetchone() == (0,)
