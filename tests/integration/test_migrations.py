"""Migrations on real Postgres: idempotent, concurrent-safe, printable, and owner-checked."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from toren_postgres import migrations
from toren_postgres.migrations import MIGRATION_LOCK_KEY, all_migrations, migrate, pending

from tests.conftest import TOREN, TorenCli, one_line
from toren.agents import AgentSpec, load_agent
from toren.errors import ConfigError, MigrationError
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)

#: The tables of an agent's schema (tool_* keep tools' durable state: toren-sandbox).
AGENT_TABLES = {"runs", "events", "prompts", "tool_blobs", "tool_manifests"}


#: The tables of each agent's schema.
AGENT_TABLES = {"runs", "events", "prompts", "budget_reservations", "budget_warnings",
                "tool_blobs", "tool_manifests", "agent_versions", "definition_files",
                "archived_runs", "model_call_costs"}


def agent(parent: Path, name: str, directory: str | None = None) -> AgentSpec:
    """A loaded agent named ``name`` (in a directory named ``directory``, default the name)."""
    folder = write_agent_dir(parent, directory or name,
                             agent_yaml=f"name: {name}\nmodel: toren/scripted\n")
    return load_agent(folder)


def ledger(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT scope, version FROM toren_control.migrations "
                            "ORDER BY scope, version").fetchall()


def tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT table_name FROM information_schema.tables "
                            "WHERE table_schema = %s", [schema]).fetchall()
    return {row[0] for row in rows}


def schema_exists(url: str, schema: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                            [schema]).fetchone() == (1,)


async def test_applying_twice_is_idempotent(empty_database: tuple[str, str],
                                            tmp_path: Path) -> None:
    _, url = empty_database
    crew = agent(tmp_path, "crew")
    expected = all_migrations([crew])

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        assert await pending(conn, [crew]) == expected
        first = await migrate(conn, [crew])
        second = await migrate(conn, [crew])
        assert await pending(conn, [crew]) == []

    assert first == expected
    assert {m.scope for m in first} == {"control", "agent_crew"}
    assert second == []
    assert ledger(url) == sorted((m.scope, m.version) for m in expected)


async def test_control_schema_of_the_fixture_is_reused(database_url: str,
                                                       tmp_path: Path) -> None:
    crew = agent(tmp_path, "crew")

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        applied = await migrate(conn, [crew])

    assert applied == migrations.agent_migrations("agent_crew")


async def test_agent_schema_has_runs_and_events(database_url: str, tmp_path: Path) -> None:
    crew = agent(tmp_path, "my-crew")

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await migrate(conn, [crew])

    assert tables(database_url, "agent_my_crew") == AGENT_TABLES
    with psycopg.connect(database_url) as conn:
        registered = conn.execute("SELECT schema_name, name, directory, model "
                                  "FROM toren_control.agents").fetchall()
        assert registered == [("agent_my_crew", "my-crew", str(crew.directory),
                               "toren/scripted")]
        run_id = conn.execute("INSERT INTO agent_my_crew.runs (id, input) "
                              "VALUES (gen_random_uuid(), '{}') RETURNING id").fetchone()[0]
        append = ("INSERT INTO agent_my_crew.events (run_id, stream, seq, type, data) "
                  "VALUES (%s, 'run', 1, 'run_created', '{}')")
        conn.execute(append, [run_id])
        conn.commit()
        # (run_id, stream, seq) is the compare-and-swap: step 1 of a stream is written once.
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(append, [run_id])


async def test_several_agents_get_one_schema_each(database_url: str, tmp_path: Path) -> None:
    crews = [agent(tmp_path, "alpha"), agent(tmp_path, "beta")]

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await migrate(conn, crews)
        assert await migrate(conn, crews) == []

    for name in ("agent_alpha", "agent_beta"):
        assert tables(database_url, name) == AGENT_TABLES


def test_concurrent_boots_apply_each_migration_once(empty_database: tuple[str, str],
                                                    toren_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    _, url = empty_database
    crew = write_agent_dir(tmp_path, "crew")
    env = {**toren_env, "DATABASE_URL": url}

    procs = [subprocess.Popen([str(TOREN), "db", "migrate", "--dir", str(crew), "--json"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=60)
            results.append((proc.returncode, stdout, stderr))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)

    assert [code for code, _, _ in results] == [0, 0, 0, 0], results
    applied = Counter()
    for _, stdout, _ in results:
        output = json.loads(stdout)
        assert output["agents"] == ["crew"]
        applied.update((m["scope"], m["version"]) for m in output["applied"])
    expected = {(m.scope, m.version) for m in all_migrations([load_agent(crew)])}
    assert set(applied) == expected
    assert all(count == 1 for count in applied.values()), applied
    assert Counter(ledger(url)) == Counter(expected)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM toren_control.agents").fetchone() == (1,)


def test_print_shows_sql_and_applies_nothing(empty_database: tuple[str, str],
                                             toren_cli: TorenCli, tmp_path: Path) -> None:
    _, url = empty_database
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("db", "migrate", "--dir", str(crew), "--print",
                       env={"DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    assert "CREATE TABLE IF NOT EXISTS toren_control.migrations" in result.stdout
    assert "-- control 0001_control" in result.stdout
    assert "CREATE SCHEMA IF NOT EXISTS agent_crew;" in result.stdout
    assert "CREATE TABLE runs" in result.stdout
    assert "VALUES ('agent_crew', 1, 'runs_events')" in result.stdout
    assert not schema_exists(url, "toren_control")
    assert not schema_exists(url, "agent_crew")

    as_json = toren_cli("db", "migrate", "--dir", str(crew), "--print", "--json",
                        env={"DATABASE_URL": url})
    assert as_json.returncode == 0, as_json.stderr
    listed = json.loads(as_json.stdout)["pending"]
    assert [(m["scope"], m["version"]) for m in listed] == [
        (m.scope, m.version) for m in all_migrations([load_agent(crew)])]
    assert all(m["sql"].strip() for m in listed)
    assert not schema_exists(url, "toren_control")


def test_printed_sql_is_a_script_a_dba_can_run(empty_database: tuple[str, str],
                                               toren_cli: TorenCli, tmp_path: Path) -> None:
    _, url = empty_database
    crew = write_agent_dir(tmp_path, "crew")
    printed = toren_cli("db", "migrate", "--dir", str(crew), "--print",
                        env={"DATABASE_URL": url})
    assert printed.returncode == 0, printed.stderr

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(printed.stdout.encode())
    assert tables(url, "agent_crew") == AGENT_TABLES

    again = toren_cli("db", "migrate", "--dir", str(crew), "--print",
                      env={"DATABASE_URL": url})
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert "Nothing to apply" in again.stderr


def test_schema_owned_by_another_agent_name_is_refused(database_url: str,
                                                       toren_cli: TorenCli,
                                                       tmp_path: Path) -> None:
    first = write_agent_dir(tmp_path / "one", "my-crew")
    second = write_agent_dir(tmp_path / "two", "my_crew")
    ok = toren_cli("db", "migrate", "--dir", str(first), env={"DATABASE_URL": database_url})
    assert ok.returncode == 0, ok.stderr

    refused = toren_cli("db", "migrate", "--dir", str(second), "--json",
                        env={"DATABASE_URL": database_url})
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert line.startswith("Error: ")
    assert "'my_crew'" in line and "'my-crew'" in line and "agent_my_crew" in line
    assert json.loads(refused.stdout)["error"]["code"] == "config_error"
    assert "Traceback" not in refused.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT name FROM toren_control.agents").fetchall() == [("my-crew",)]


async def test_owner_check_in_process(database_url: str, tmp_path: Path) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await migrate(conn, [agent(tmp_path / "a", "my-crew")])
        with pytest.raises(ConfigError, match="already belongs to agent 'my-crew'"):
            await migrate(conn, [agent(tmp_path / "b", "my_crew")])
        # The same name from another directory is the same agent, moved: allowed.
        moved = agent(tmp_path / "c", "my-crew", directory="elsewhere")
        assert await migrate(conn, [moved]) == []
        cursor = await conn.execute("SELECT directory FROM toren_control.agents")
        assert await cursor.fetchall() == [(str(moved.directory),)]


async def test_a_held_lock_fails_the_migration_instead_of_hanging(
        empty_database: tuple[str, str], tmp_path: Path) -> None:
    _, url = empty_database
    crew = agent(tmp_path, "crew")

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as holder, \
            await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await holder.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        with pytest.raises(MigrationError, match="migration lock"):
            await migrate(conn, [crew], lock_timeout_s=0.3)
        await holder.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
        assert await migrate(conn, [crew]) == all_migrations([crew])
