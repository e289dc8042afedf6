"""sql_query through Toren: an agent enables it, runs it offline, the rows land in the log."""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from toren.config import Settings
from toren.errors import AgentDefinitionError, MissingEnvError
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir

EXAMPLE = Path(__file__).parents[3] / "contrib" / "examples" / "tool-plugins" / "sql-analyst"
MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
def make_runtime(toren_runtime: MakeRuntime) -> MakeRuntime:
    async def make(dirs: list[Path]) -> Runtime:
        return await toren_runtime(dirs, load_plugins=("toren-sql",))
    return make


async def tool_outputs(runtime: Runtime, agent: str, text: str) -> list[dict[str, Any]]:
    run_id = await runtime.start_run(agent, text)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record
    return [event.data for event in await runtime.events(run_id)
            if event.type == "ToolCallCompleted"]


async def test_the_example_agent_answers_from_the_database(
        sql_database: str, select_only_url: str, make_runtime: MakeRuntime,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SQL_DATABASE_URL", select_only_url)
    agent_dir = shutil.copytree(EXAMPLE, tmp_path / "sql-analyst")
    runtime = await make_runtime([agent_dir])

    (result,) = await tool_outputs(runtime, "sql-analyst", "SELECT count(*) AS n FROM orders")
    assert result["name"] == "sql_query" and not result["is_error"]
    assert json.loads(result["output"])["rows"] == [[50]]

    (refused,) = await tool_outputs(runtime, "sql-analyst", "SELECT 1; DELETE FROM orders")
    assert refused["is_error"] and "more than one statement" in refused["output"]
    with psycopg.connect(sql_database) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (50,)


async def test_an_agent_reads_its_own_variable_and_another_the_shared_one(
        sql_database: str, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    with psycopg.connect(sql_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA sales; CREATE TABLE sales.orders AS "
                     "SELECT g AS id FROM generate_series(1, 3) g")
    monkeypatch.setenv("SQL_DATABASE_URL", sql_database)
    monkeypatch.setenv("SALES_DATABASE_URL",
                       make_conninfo(sql_database, options="-c search_path=sales"))
    superuser = {"allowPrivilegedRole": True}  # the test database's own role
    shared = write_agent_dir(tmp_path, "ops", tools=["sql_query"], sql=superuser)
    own = write_agent_dir(tmp_path, "sales", tools=[
        {"name": "sql_query", "env": {"SQL_DATABASE_URL": "SALES_DATABASE_URL"}}], sql=superuser)
    runtime = await make_runtime([shared, own])

    (ops,) = await tool_outputs(runtime, "ops", "SELECT count(*) FROM orders")
    (sales,) = await tool_outputs(runtime, "sales", "SELECT count(*) FROM orders")
    assert json.loads(ops["output"])["rows"] == [[50]]
    assert json.loads(sales["output"])["rows"] == [[3]]


async def test_a_superuser_is_refused_unless_the_agent_allows_a_privileged_role(
        sql_database: str, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("SQL_DATABASE_URL", sql_database)  # the server's superuser
    refusing = write_agent_dir(tmp_path, "careful", tools=["sql_query"])
    allowing = write_agent_dir(tmp_path, "lab", tools=["sql_query"],
                               sql={"allowPrivilegedRole": True})
    runtime = await make_runtime([refusing, allowing])

    (refused,) = await tool_outputs(runtime, "careful", "SELECT count(*) FROM orders")
    assert refused["is_error"]
    role = conninfo_to_dict(sql_database)["user"]
    assert (f"refused to run: the database role {role!r} is a superuser" in refused["output"]
            and "docs/tools/database.md, 'A SELECT-only role'" in refused["output"]
            and "sql: {allowPrivilegedRole: true}" in refused["output"])
    (allowed,) = await tool_outputs(runtime, "lab", "SELECT count(*) FROM orders")
    assert json.loads(allowed["output"])["rows"] == [[50]]
    (still,) = await tool_outputs(runtime, "lab", "SELECT pg_catalog.pg_reload_conf()")
    assert still["is_error"] and "refused: the query calls pg_reload_conf" in still["output"]


def test_allow_privileged_role_must_be_a_boolean(tmp_path: Path) -> None:
    agent_dir = write_agent_dir(tmp_path, "lab", tools=["sql_query"],
                                sql={"allowPrivilegedRole": "yes"})
    with pytest.raises(AgentDefinitionError, match="allowPrivilegedRole"):
        Runtime([agent_dir], settings=Settings(load_plugins=("toren-sql",)))


def test_a_missing_variable_stops_startup_naming_the_tool(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SQL_DATABASE_URL", raising=False)
    agent_dir = shutil.copytree(EXAMPLE, tmp_path / "sql-analyst")
    with pytest.raises(MissingEnvError) as info:
        Runtime([agent_dir], settings=Settings(load_plugins=("toren-sql",)))
    assert (f"SQL_DATABASE_URL (needed by sql-analyst: tool sql_query enabled at "
            f"{agent_dir / 'agent.yaml'}:7)") in info.value.message
