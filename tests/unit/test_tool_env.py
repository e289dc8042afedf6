"""Plugin tools declare the environment they read; agents may rename it; startup checks it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import toren
from toren.agents import check_env, load_agent
from toren.errors import AgentDefinitionError, MissingEnvError, ToolError
from toren.execution.context import ToolCallContext
from toren.seams.tools import Tool, tool_from_function

MakeAgentDir = Callable[..., Path]


@toren.tool(requires_env=("SQL_DATABASE_URL",))
def sql_query(query: str) -> str:
    """Run a query."""
    return query


TOOLS: dict[str, Tool] = {"sql_query": tool_from_function(sql_query, source="plugin sql")}


def test_a_tool_declares_its_environment() -> None:
    assert TOOLS["sql_query"].required_env == ("SQL_DATABASE_URL",)
    with pytest.raises(ToolError, match="not an environment variable name"):
        toren.tool(requires_env=("NOT A NAME",))


def test_enabling_a_tool_folds_its_variables_into_the_agents_env(
        make_agent_dir: MakeAgentDir) -> None:
    agent = load_agent(make_agent_dir(tools=["sql_query"], env=["OTHER"]), TOOLS)
    assert agent.env == ("OTHER", "SQL_DATABASE_URL")

    with pytest.raises(MissingEnvError) as info:
        check_env([agent], env={"OTHER": "1"})
    message = info.value.message
    yaml_path = agent.directory / "agent.yaml"
    assert f"SQL_DATABASE_URL (needed by test-agent: tool sql_query enabled at {yaml_path}:" \
        in message
    check_env([agent], env={"OTHER": "1", "SQL_DATABASE_URL": "postgresql://x"})


def test_two_agents_read_different_variables_for_one_tool(make_agent_dir: MakeAgentDir) -> None:
    sales = load_agent(make_agent_dir("sales", tools=[
        {"name": "sql_query", "env": {"SQL_DATABASE_URL": "SALES_DATABASE_URL"}}]), TOOLS)
    ops = load_agent(make_agent_dir("ops", tools=["sql_query"]), TOOLS)

    assert sales.env == ("SALES_DATABASE_URL",) and ops.env == ("SQL_DATABASE_URL",)
    assert sales.tools["sql_query"].env_var("SQL_DATABASE_URL") == "SALES_DATABASE_URL"
    assert TOOLS["sql_query"].env_names == {}  # the registered tool is not changed
    with pytest.raises(MissingEnvError, match="SALES_DATABASE_URL"):
        check_env([sales, ops], env={"SQL_DATABASE_URL": "x"})

    context = ToolCallContext("sales", "r", "main", 1, "c", "k",
                              env_names=sales.tools["sql_query"].env_names)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SALES_DATABASE_URL", "sales-db")
        patch.setenv("SQL_DATABASE_URL", "shared-db")
        assert context.getenv("SQL_DATABASE_URL") == "sales-db"


def test_renaming_a_variable_the_tool_does_not_read_names_file_and_line(
        make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        tools:
          - name: sql_query
            env:
              SQL_DATABASE_UR: MINE
        """)
    with pytest.raises(AgentDefinitionError) as info:
        load_agent(directory, TOOLS)
    assert info.value.path == str(directory / "agent.yaml") and info.value.line == 5
    assert "reads no variable 'SQL_DATABASE_UR' (did you mean 'SQL_DATABASE_URL'?)" \
        in info.value.message


@pytest.mark.parametrize(("entry", "line", "words"), [
    ({"env": {}}, 3, "tools.0: 'name' is a required property"),
    ({"name": "sql_query", "env": {"A": "not a var"}}, 5,
     "tools.0.env.A: 'not a var' does not match"),
    ({"name": "sql_query", "other": 1}, 4,
     "unknown key 'tools.0.other'; valid keys here: name, env"),
])
def test_malformed_tool_entries_are_errors(make_agent_dir: MakeAgentDir, entry: dict[str, object],
                                           line: int, words: str) -> None:
    """Each names the part of the entry that is wrong, at its own line."""
    with pytest.raises(AgentDefinitionError) as info:
        load_agent(make_agent_dir(tools=[entry]), TOOLS)
    assert info.value.line == line
    assert words in info.value.message
