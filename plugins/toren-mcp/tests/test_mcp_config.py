"""``mcpServers:`` as the agent loader reads it (no server is started): the naming scheme,
what an entry may say, and the errors a user gets with the file and line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from toren_mcp.client import parse_entry, tool_names

from toren.agents import load_agent
from toren.errors import AgentDefinitionError, ToolError
from toren.testing import PluginHost, write_agent_dir

SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(["toren-mcp"])


def test_tools_are_named_server__tool_within_64_characters() -> None:
    long = "a" * 70
    names = tool_names("files__", ["read", "dir/list", "dir.list", long])
    assert names["read"] == "files__read"
    assert names["dir/list"] == "files__dir_list"
    # made the same by the replacement: the second gets a hash of its own name
    assert names["dir.list"].startswith("files__dir_list"[:55]) and names["dir.list"] != \
        names["dir/list"] and len(names["dir.list"]) <= 64
    assert len(names[long]) == 64 and names[long].startswith("files__aaaa")
    assert tool_names("files__", [long]) == {long: names[long]}  # stable


def test_an_entry_is_stdio_or_http_and_says_which_variables_it_reads() -> None:
    config = parse_entry("gh", {"url": "https://example.com/mcp",
                                "headers": {"Authorization": "Bearer ${GH_TOKEN}"}})
    assert config.transport == "http" and config.required_env == ("GH_TOKEN",)
    config = parse_entry("db", {"command": "db-mcp", "env": ["DB_URL", "DB_ROLE"],
                                "idempotent": ["query"], "allow": ["query", "list_*"],
                                "deny": ["list_secrets"]})
    assert config.required_env == ("DB_URL", "DB_ROLE")
    assert config.is_idempotent("query") and not config.is_idempotent("list_tables")
    assert config.offers("list_tables") and not config.offers("list_secrets")
    assert not config.offers("drop_table")
    for entry, says in [
            ({"command": "x", "url": "http://a/mcp"}, "not both"),
            ({"url": "http://a/mcp", "env": {"A": "b"}}, "takes headers"),
            ({"command": "x", "headers": {"A": "b"}}, "takes env"),
            ({"command": "x", "env": {"A": "${not a name}"}}, "env.A")]:
        with pytest.raises(ToolError, match=says):
            parse_entry("bad", entry)


def test_without_toren_mcp_the_key_names_the_distribution_to_install(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "a", mcpServers={"time": SERVER})
    with pytest.raises(AgentDefinitionError, match=r"agent.yaml:\d+: mcpServers: no installed "
                                                   r"plugin serves this key; install toren-mcp"):
        load_agent(directory, tool_sources={})
    assert load_agent(directory).tool_sources == ()  # read, not served: no plugins asked


def test_entry_errors_carry_the_file_and_line(tmp_path: Path, host: PluginHost) -> None:
    directory = write_agent_dir(tmp_path, "a", agent_yaml="""\
        model: toren/scripted
        mcpServers:
          ok:
            command: python
          broken:
            command: python
            url: http://127.0.0.1:1/mcp
        """)
    with pytest.raises(AgentDefinitionError, match=r"agent.yaml:\d+: "):
        load_agent(directory, host.tools, tool_sources=host.tool_sources)
    directory = write_agent_dir(tmp_path, "b", agent_yaml="""\
        model: toren/scripted
        mcpServers:
          time:
            command: python
            envs: [A]
        """)
    with pytest.raises(AgentDefinitionError, match=r"agent.yaml:5: unknown key "
                                                   r"'mcpServers.time.envs' \(did you mean 'env'"):
        load_agent(directory, host.tools, tool_sources=host.tool_sources)
    directory = write_agent_dir(tmp_path, "c", mcpServers={"my_server": SERVER})
    with pytest.raises(AgentDefinitionError, match="my_server"):
        load_agent(directory, host.tools, tool_sources=host.tool_sources)


def test_a_tool_named_like_a_servers_tools_is_refused(tmp_path: Path, host: PluginHost
                                                      ) -> None:
    directory = write_agent_dir(tmp_path, "a", mcpServers={"time": SERVER},
                                tools_py="def time__now() -> str:\n    return 'noon'\n")
    with pytest.raises(AgentDefinitionError, match=r"mcpServers.time: its tools are named "
                                                   r"time__<tool>, and so is the tool .time__now."):
        load_agent(directory, host.tools, tool_sources=host.tool_sources)


def test_approvals_and_subagents_name_a_servers_tools_before_they_are_discovered(
        tmp_path: Path, host: PluginHost) -> None:
    directory = write_agent_dir(
        tmp_path, "a", mcpServers={"time": SERVER}, env=["OTHER"],
        approvals={"time__convert_time": {"approvers": ["role:operator"]}},
        subagents={
            "clock": "---\ntools: [time__*]\n---\nTell the time.\n",
            "plain": "---\ntools: []\nmcpServers:\n  git:\n    command: git-mcp\n"
                     "    env: {TOKEN: '${GIT_TOKEN}'}\n---\nNo clocks here.\n",
            "default": "Everything the agent has.\n"})
    agent = load_agent(directory, host.tools, tool_sources=host.tool_sources)
    assert agent.approvals["time__convert_time"].approvers == ("role:operator",)
    [time_entry] = agent.tool_sources
    assert agent.subagents["clock"].tool_sources == (time_entry,)
    assert agent.subagents["default"].tool_sources == (time_entry,)
    [git_entry] = agent.subagents["plain"].tool_sources
    assert git_entry.prefix == "git__"
    # the subagent's server's variable is required at startup, as the agent's are
    assert "GIT_TOKEN" in agent.env and "OTHER" in agent.env
    assert agent.to_json()["toolSources"] == [{"name": "time", "prefix": "time__",
                                               "transport": "stdio",
                                               "server": f"{sys.executable} -m mcp_server_time"}]
    bad = write_agent_dir(tmp_path, "b", mcpServers={"time": SERVER},
                          approvals={"clock__now": {}})
    with pytest.raises(AgentDefinitionError, match="approvals: the agent has no tool "
                                                   "'clock__now'"):
        load_agent(bad, host.tools, tool_sources=host.tool_sources)
