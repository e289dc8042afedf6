"""MCP servers as tools across real processes: a ``toren worker`` SIGKILLed in the middle of
an MCP call resumes in another worker without repeating the calls that completed; and an agent
of one process uses the tools of Toren's own ``/mcp`` (streamable HTTP) on a ``toren dev``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from mcp_support import FAKE_SERVER, AgentFactory, of_type, plan, run_plan

from toren.core.catalog import validate_event
from toren.testing import OutputProcess, wait_for, write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOREN = Path(sys.executable).parent / "toren"


def toren_env(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith("TOREN_")}
    return env | {"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-mcp",
                  "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
                  "TOREN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"} | extra


def run_state(database_url: str, schema: str, run_id: str
              ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(f"SELECT status FROM {schema}.runs WHERE id = %s",
                           [run_id]).fetchone()
        events = conn.execute(f"SELECT stream, type, data FROM {schema}.events "
                              "WHERE run_id = %s ORDER BY stream, seq", [run_id]).fetchall()
    assert row is not None
    for stream, kind, data in events:
        validate_event(stream, kind, data)
    return row[0], [(kind, data) for _stream, kind, data in events]


def start_worker(directory: Path, env: dict[str, str], tmp_path: Path,
                 name: str) -> OutputProcess:
    worker = OutputProcess([str(TOREN), "worker", "--dir", str(directory), "--json"], env=env,
                           stderr_path=tmp_path / f"{name}.stderr")
    assert worker.next_json()["event"] == "ready", worker.stderr
    return worker


def test_a_worker_sigkilled_mid_call_resumes_without_repeating_completed_calls(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    log = tmp_path / "calls.log"
    log.touch()
    directory = write_agent_dir(tmp_path / "agents", "reacher", mcpServers={"fake": {
        "command": sys.executable, "args": [str(FAKE_SERVER)],
        "env": {"FAKE_MCP_LOG": str(log)}}})
    # the first worker kills itself once the second call ran on the server, before its
    # result is recorded
    first_env = toren_env(database_url, tmp_path, TOREN_CRASH_AT="after_tool@2",
                          TOREN_CRASH_ONCE=str(tmp_path / "crashed-once"))
    created = subprocess.run(
        [str(TOREN), "run", "reacher", plan(("fake__record", {"text": "one"}),
                                            ("fake__record", {"text": "two"}),
                                            ("fake__record", {"text": "three"})),
         "--no-follow", "--json", "--dir", str(directory)],
        env=first_env, capture_output=True, text=True, timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]

    first = start_worker(directory, first_env, tmp_path, "first")
    output_processes.append(first)
    assert first.proc.wait(timeout=60) == -9, first.stderr  # SIGKILL, at the crash point
    _status, events = run_state(database_url, "agent_reacher", run_id)
    assert [d["output"] for d in of_type(events, "ToolCallCompleted")] == ["recorded one"]
    assert log.read_text() == "one\ntwo\n"  # the second call did run on the server

    second = start_worker(directory, toren_env(database_url, tmp_path), tmp_path, "second")
    output_processes.append(second)
    assert wait_for(lambda: run_state(database_url, "agent_reacher", run_id)[0] == "completed",
                    60), second.stderr
    _status, events = run_state(database_url, "agent_reacher", run_id)
    one, two, three = of_type(events, "ToolCallCompleted")
    assert one["output"] == "recorded one" and not one["is_error"]
    # not idempotent (the default): reported to the model, not run a second time
    assert two["is_error"] and two["error_kind"] == "interrupted"
    assert three["output"] == "recorded three" and not three["is_error"]
    assert log.read_text() == "one\ntwo\nthree\n"  # each call ran on the server exactly once


async def test_an_agent_uses_torens_own_mcp_endpoint_of_another_process(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess],
        mcp_agent: AgentFactory) -> None:
    write_agent_dir(tmp_path / "served", "helper")
    dev = OutputProcess([str(TOREN), "dev", "--dir", str(tmp_path / "served"), "--port", "0",
                         "--json"], env=toren_env(database_url, tmp_path),
                        stderr_path=tmp_path / "dev.stderr")
    output_processes.append(dev)
    url = str(dev.next_json()["url"]).rstrip("/")
    runtime = await mcp_agent(name="caller", mcpServers={"toren": {
        "url": f"{url}/mcp", "allow": ["list_agents", "start_run", "get_run"]}})
    _run_id, events = await run_plan(
        runtime, "caller", ("toren__list_agents", {}),
        ("toren__start_run", {"agent": "helper", "input": "hello from another process",
                              "idempotency_key": "from-caller-1"}))
    [started] = of_type(events, "TaskStarted")
    assert sorted(n for n in started["tools"] if n.startswith("toren__")) == [
        "toren__get_run", "toren__list_agents", "toren__start_run"]
    listed, created = of_type(events, "ToolCallCompleted")
    assert not listed["is_error"] and not created["is_error"], (listed, created)
    assert [agent["name"] for agent in json.loads(listed["output"])["agents"]] == ["helper"]
    helper_run = json.loads(created["output"])["id"]
    async with httpx2.AsyncClient(base_url=url, timeout=30) as http:
        for _ in range(200):
            run = (await http.get(f"/runs/{helper_run}")).json()
            if run["status"] == "completed":
                break
            await asyncio.sleep(0.1)
    assert run["status"] == "completed", run
    assert "hello from another process" in run["output"]
    # on the server's own database: no embedded Postgres to stop cleanly, so no need to wait
    # out its graceful stop (which, after a run started through /mcp, takes ~10 s)
    dev.proc.kill()
