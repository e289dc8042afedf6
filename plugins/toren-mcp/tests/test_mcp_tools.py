"""MCP servers as tools (``mcpServers:``), in a started runtime on real Postgres: the real
``mcp-server-time`` and ``mcp-server-git`` from PyPI over stdio, and a fake server (the SDK's
server) for what goes wrong: a crash mid-call, a hang, a malformed result, a huge result, an
error result, a server that cannot start, a tool list that changes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_support import AgentFactory, of_type, plan, run_plan, until

from toren.errors import MissingEnvError, ToolError
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.timeout(120)]

TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time",
                                                   "--local-timezone", "UTC"]}


async def test_the_time_servers_tools_are_tool_calls_like_any_other(
        mcp_agent: AgentFactory) -> None:
    runtime = await mcp_agent(mcpServers={"time": TIME_SERVER})
    run_id, events = await run_plan(
        runtime, "reacher", ("time__get_current_time", {"timezone": "Europe/Paris"}),
        ("time__convert_time", {"source_timezone": "UTC", "time": "12:00",
                                "target_timezone": "Asia/Tokyo"}))
    [started] = of_type(events, "TaskStarted")
    assert {"time__get_current_time", "time__convert_time"} <= set(started["tools"])
    calls = of_type(events, "ToolCallStarted")
    assert [call["name"] for call in calls] == ["time__get_current_time", "time__convert_time"]
    assert calls[0]["idempotency_key"].startswith(f"toren:{run_id}:")
    results = of_type(events, "ToolCallCompleted")
    assert not any(result["is_error"] for result in results), results
    assert '"timezone": "Europe/Paris"' in results[0]["output"]
    assert "21:00" in results[1]["output"]  # noon UTC is 21:00 in Tokyo
    # the model was offered the server's tools with their schemas (the session is reused)
    [agent] = runtime.agents.values()
    [entry] = agent.tool_sources
    assert entry.to_json()["tools"] == ["time__get_current_time", "time__convert_time"]


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository with one commit and a change not staged."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "notes.txt").write_text("remember the milk\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "First notes"], check=True)
    (repo / "notes.txt").write_text("remember the milk and the bread\n")
    return repo


async def test_the_git_server_over_a_repository_with_an_allow_list(
        mcp_agent: AgentFactory, repository: Path) -> None:
    repo = repository
    runtime = await mcp_agent(mcpServers={"git": {
        "command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)],
        "allow": ["git_status", "git_log", "git_diff_*"], "deny": ["git_diff_staged"],
        "idempotent": True}})
    _run_id, events = await run_plan(runtime, "reacher", ("git__git_log", {
        "repo_path": str(repo), "max_count": 5}), ("git__git_diff_unstaged", {
            "repo_path": str(repo)}), ("git__git_status", {"repo_path": str(repo)}))
    [started] = of_type(events, "TaskStarted")
    assert sorted(name for name in started["tools"] if name.startswith("git__")) == [
        "git__git_diff_unstaged", "git__git_log", "git__git_status"]
    results = {r["name"]: r for r in of_type(events, "ToolCallCompleted")}
    assert not any(r["is_error"] for r in results.values()), results
    assert "First notes" in results["git__git_log"]["output"]
    assert "and the bread" in results["git__git_diff_unstaged"]["output"]
    assert "notes.txt" in results["git__git_status"]["output"]


async def test_what_goes_wrong_on_the_server_is_the_calls_error_and_the_run_goes_on(
        mcp_agent: AgentFactory, fake_server: dict[str, Any], fake_log: Path) -> None:
    runtime = await mcp_agent(
        mcpServers={"fake": fake_server | {"timeoutSeconds": 1}},
        limits={"maxToolOutputBytes": 1000})
    _run_id, events = await run_plan(
        runtime, "reacher",
        ("fake__record", {"text": "before"}),
        ("fake__crash", {}),
        ("fake__record", {"text": "after"}),  # on the server started again
        ("fake__hang", {}),
        ("fake__malformed", {}),
        ("fake__huge", {"size": 200_000}),
        ("fake__fail", {"reason": "closed on Sundays"}),
        ("fake__structured", {}),
        ("fake__record", {}))  # arguments that do not fit the server's schema
    results = of_type(events, "ToolCallCompleted")
    assert [r["name"] for r in results] == [
        "fake__record", "fake__crash", "fake__record", "fake__hang", "fake__malformed",
        "fake__huge", "fake__fail", "fake__structured", "fake__record"]
    before, crash, after, hang, malformed, huge, fail, structured, invalid = results
    assert not before["is_error"] and before["output"] == "recorded before"
    assert crash["is_error"] and "stopped during the call of crash" in crash["output"]
    assert "crashing on purpose mid-call" in crash["output"]  # the server's stderr tail
    assert not after["is_error"] and after["output"] == "recorded after"
    assert hang["is_error"] and "did not answer hang within 1 s" in hang["output"]
    assert malformed["is_error"] and "malformed result" in malformed["output"]
    assert not huge["is_error"] and huge["truncated"] and huge["original_bytes"] == 200_000
    assert len(huge["output"].encode()) <= 1000
    assert fail["is_error"] and "closed on Sundays" in fail["output"]
    assert structured["output"] == '{"answer": 42}' or '"answer": 42' in structured["output"]
    assert invalid["is_error"] and invalid["error_kind"] == "invalid_arguments"
    assert await asyncio.to_thread(fake_log.read_text) == "before\nafter\n"


async def test_a_server_that_cannot_start_stops_the_worker_naming_agent_server_and_stderr(
        mcp_agent: AgentFactory, fake_server: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MCP_FAIL_START", "1")
    broken = fake_server | {"env": {"FAKE_MCP_LOG": "${FAKE_MCP_LOG}",
                                    "FAKE_MCP_FAIL_START": "${FAKE_MCP_FAIL_START}"}}
    with pytest.raises(ToolError) as failed:
        await mcp_agent(mcpServers={"fake": broken})
    message = failed.value.message
    assert "agent 'reacher', mcpServers.fake" in message
    assert "could not start" in message
    assert "cannot open its database /nonexistent/fake.db" in message


async def test_a_variable_a_server_reads_is_required_at_startup(
        mcp_agent: AgentFactory, fake_server: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_SECRET_SOURCE", raising=False)
    with pytest.raises(MissingEnvError) as missing:
        await mcp_agent(mcpServers={"fake": fake_server | {"env": {
            "FAKE_MCP_LOG": "${FAKE_MCP_LOG}", "FAKE_SECRET": "${FAKE_SECRET_SOURCE}"}}})
    assert "FAKE_SECRET_SOURCE" in missing.value.message
    assert "mcpServers.fake" in missing.value.message
    monkeypatch.setenv("FAKE_SECRET_SOURCE", "open sesame")
    monkeypatch.setenv("UNRELATED_SECRET", "never passed on")
    runtime = await mcp_agent(name="reacher-2", mcpServers={"fake": fake_server | {"env": {
        "FAKE_MCP_LOG": "${FAKE_MCP_LOG}", "FAKE_SECRET": "${FAKE_SECRET_SOURCE}"}}})
    _run_id, events = await run_plan(runtime, "reacher-2", ("fake__secret", {}))
    [result] = of_type(events, "ToolCallCompleted")
    assert result["output"] == "open sesame"


async def test_approvals_apply_to_mcp_tools_by_name(
        mcp_agent: AgentFactory, fake_server: dict[str, Any], fake_log: Path) -> None:
    runtime = await mcp_agent(mcpServers={"fake": fake_server},
                              approvals={"fake__record": {}})
    run_id = await runtime.start_run("reacher", plan(("fake__record", {"text": "approved"})))
    waiting = await until(lambda: runtime.approvals.list(run_id=run_id, status="pending"))
    assert [approval.tool for approval in waiting] == ["fake__record"]
    assert await asyncio.to_thread(fake_log.read_text) == ""  # not run before a person said so
    await runtime.approvals.approve(waiting[0].id, decided_by="tester")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    assert await asyncio.to_thread(fake_log.read_text) == "approved\n"


async def test_a_tool_list_that_changes_is_offered_at_the_next_call(
        mcp_agent: AgentFactory, fake_server: dict[str, Any]) -> None:
    runtime = await mcp_agent(mcpServers={"fake": fake_server})
    _run_id, events = await run_plan(runtime, "reacher", ("fake__add_tool", {"name": "newbie"}),
                                     ("fake__newbie", {}))
    results = of_type(events, "ToolCallCompleted")
    assert [r["output"] for r in results] == ["added newbie", "I am newbie"]


def test_toren_agents_tools_lists_what_the_servers_offer(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path / "agents", "timely", mcpServers={"time": TIME_SERVER | {
        "deny": ["convert_*"], "idempotent": ["get_current_time"]}})
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOREN_")}
    env |= {"TOREN_LOAD_PLUGINS": "toren-mcp", "TOREN_HOME": str(tmp_path / "home")}
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "toren"), "agents", "tools", "--dir",
         str(directory), "--json"], env=env, capture_output=True, text=True, timeout=60,
        check=False)
    assert listed.returncode == 0, listed.stderr
    [agent] = json.loads(listed.stdout)["agents"]
    assert agent["tools"] == [{"name": "time__get_current_time", "source": "mcpServers time",
                               "idempotent": True,
                               "description": "Get current time in a specific timezone"}]
