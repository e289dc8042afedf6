"""The MCP channel (plugins/toren-mcp) with the real `mcp` client SDK: streamable HTTP at /mcp
on `toren serve` (with keys) and `toren mcp` on stdio against it; and the kernel without it."""

from __future__ import annotations

import asyncio
import importlib.metadata as metadata
import json
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import TorenCli
from tests.e2e.test_http_api import TOOLS, call
from toren.cli import main
from toren.testing import write_agent_dir

#: the `toren` command of this environment
TOREN = str(Path(sys.executable).parent / "toren")
ROOT = Path(__file__).resolve().parents[2]

#: The tests' processes load only the built-ins (tests/conftest.py): these load the plugin too.
WITH_MCP = {"TOREN_LOAD_PLUGINS": "toren-mcp"}

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
ZERO = "00000000-0000-0000-0000-000000000000"
APPROVAL_DESK = ROOT / "contrib" / "examples" / "approval-desk"


@pytest.fixture
def served(toren_cli: Any, start_toren: Any, database_url: str,
           tmp_path: Path) -> tuple[str, str]:
    """A `toren serve --workers` with a key, and slow scripted model calls; (url, key)."""
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "1.5", **WITH_MCP}
    token = json.loads(toren_cli("keys", "create", "mcp", "--json", env=env).stdout)["key"]
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    server = start_toren("serve", "--workers", "--dir", str(tmp_path / "crews"), "--port", "0",
                         "--json", env=env)
    return str(server.next_json()["url"]), token


def http_session(url: str, key: str | None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return streamable_http_client(url + "/mcp",
                                  http_client=httpx2.AsyncClient(headers=headers, timeout=60))


def data(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error
    return str(result.content[0].text)


async def test_http_mcp_runs_outlive_a_client_that_disconnects_mid_wait(
        served: tuple[str, str]) -> None:
    url, key = served
    async with http_session(url, key) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = {tool.name for tool in (await mcp.list_tools()).tools}
        assert {"list_agents", "start_run", "get_run", "wait_for_run", "list_runs",
                "cancel_run", "send_signal", "get_receipt", "session_start", "session_send",
                "session_get", "approvals_list", "approve", "deny", "edit_approval",
                "answer_approval"} <= tools
        agents = data(await mcp.call_tool("list_agents", {}))
        assert [agent["name"] for agent in agents["agents"]] == ["crew"]
        started = data(await mcp.call_tool("start_run", {"agent": "crew", "input": "postgres",
                                                         "idempotency_key": "mcp-1"}))
        again = data(await mcp.call_tool("start_run", {"agent": "crew", "input": "postgres",
                                                       "idempotency_key": "mcp-1"}))
        assert again["id"] == started["id"]
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        # the client goes away in the middle of a wait
        waiting = asyncio.ensure_future(mcp.call_tool(
            "wait_for_run", {"run_id": started["id"], "timeout_s": 60},
            progress_callback=on_progress))
        await asyncio.sleep(1.2)
        assert progress, "no progress notification while waiting"
        waiting.cancel()
    # a new connection finds the run still going, then finished
    async with http_session(url, key) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        run = data(await mcp.call_tool("wait_for_run", {"run_id": started["id"],
                                                        "timeout_s": 90}))
        assert run["finished"] is True and run["status"] == "completed"
        assert "facts about postgres" in json.dumps(run["output"])
        receipt = data(await mcp.call_tool("get_receipt", {"run_id": started["id"]}))
        assert receipt["totals"]["model_calls"] >= 1 and receipt["why"]
        resource = await mcp.read_resource(f"toren://runs/{started['id']}/receipt")
        assert json.loads(resource.contents[0].text)["totals"] == receipt["totals"]
        listed = data(await mcp.call_tool("list_runs", {"agent": "crew"}))
        assert [r["id"] for r in listed["runs"]] == [started["id"]]
        assert data(await mcp.call_tool("approvals_list", {}))["approvals"] == []

        # sessions: a turn and its transcript
        session = data(await mcp.call_tool("session_start", {"agent": "crew"}))
        replied = data(await mcp.call_tool("session_send", {"session_id": session["id"],
                                                            "text": "postgres",
                                                            "wait_s": 90}))
        assert replied["status"] == "awaiting_input"
        assert "facts about postgres" in replied["transcript"][-1]["text"]
        assert data(await mcp.call_tool("session_get", {"session_id": session["id"]}))[
            "transcript"] == replied["transcript"]
        transcript = await mcp.read_resource(f"toren://sessions/{session['id']}/transcript")
        assert json.loads(transcript.contents[0].text)["transcript"] == replied["transcript"]

        # cancel a run started for it
        doomed = data(await mcp.call_tool("start_run", {"agent": "crew", "input": "x"}))
        sent = data(await mcp.call_tool("send_signal", {"run_id": doomed["id"], "name": "nudge",
                                                        "payload": {"n": 1}}))
        assert (sent["number"], sent["created"]) == (1, True)
        cancelled = data(await mcp.call_tool("cancel_run", {"run_id": doomed["id"],
                                                            "reason": "not needed"}))
        assert cancelled["status"] == "cancelled"

        # hostile arguments: clear tool errors, and the server goes on answering
        for name, arguments, expected in [
                ("start_run", {"agent": "ghost", "input": "x"}, "agent_not_found"),
                ("start_run", {"input": "x"}, "agent"),
                ("start_run", {"agent": "crew", "input": "x", "webhook": "ftp://example.com"},
                 "invalid_webhook"),
                ("start_run", {"agent": "crew", "input": "x",
                               "webhook": "http://169.254.169.254/latest"}, "invalid_webhook"),
                ("get_run", {"run_id": "not-a-run"}, "run_id"),
                ("get_run", {"run_id": ZERO}, "run_not_found"),
                ("send_signal", {"run_id": started["id"], "name": "go"}, "run_finished"),
                ("send_signal", {"run_id": started["id"], "name": "Not A Name"}, "name"),
                ("get_run", {"run_id": "0" * 5000}, "run_id"),
                ("wait_for_run", {"run_id": started["id"], "timeout_s": -1}, "timeout_s"),
                ("wait_for_run", {"run_id": started["id"], "timeout_s": 10**9}, "timeout_s"),
                ("list_runs", {"limit": 0}, "limit"),
                ("list_runs", {"status": "sleeping"}, "invalid_status"),
                ("session_send", {"session_id": session["id"], "text": ""}, "text"),
                ("approve", {"approval_id": "nope"}, "approval_id"),
                ("approve", {"approval_id": ZERO}, "approval_not_found"),
                ("deny", {"approval_id": 7}, "approval_id"),
                ("answer_approval", {"approval_id": ZERO, "answer": "x", "digest": "no"},
                 "digest"),
                ("edit_approval", {"approval_id": ZERO, "arguments": {}, "digest": "0" * 64},
                 "approval_not_found")]:
            assert expected in error_text(await mcp.call_tool(name, arguments)), name
        assert data(await mcp.call_tool("get_run", {"run_id": started["id"]}))[
            "status"] == "completed"


async def test_http_mcp_needs_a_valid_key(served: tuple[str, str]) -> None:
    url, _ = served
    for bad in (None, "wrong"):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bad}"} if bad
                                      else {}) as http:
            response = await http.post(url + "/mcp", json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream"})
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"


async def test_stdio_mcp_drives_runs_over_the_http_api(served: tuple[str, str]) -> None:
    url, key = served
    params = StdioServerParameters(command=TOREN, args=["mcp"],
                                   env={"TOREN_URL": url, "TOREN_API_KEY": key, **WITH_MCP})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        started = data(await mcp.call_tool("start_run", {"agent": "crew", "input": "stdio"}))
        waiting = asyncio.ensure_future(mcp.call_tool(
            "wait_for_run", {"run_id": started["id"], "timeout_s": 60}))
        await asyncio.sleep(0.5)
        waiting.cancel()  # the client leaves mid-wait (its process stops the server)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        run = data(await mcp.call_tool("wait_for_run", {"run_id": started["id"],
                                                        "timeout_s": 90}))
        assert run["status"] == "completed" and run["finished"] is True
        assert "agent_not_found" in error_text(
            await mcp.call_tool("start_run", {"agent": "ghost", "input": "x"}))
    wrong = StdioServerParameters(command=TOREN, args=["mcp"],
                                  env={"TOREN_URL": url, "TOREN_API_KEY": "wrong", **WITH_MCP})
    async with stdio_client(wrong) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        assert "unauthorized" in error_text(await mcp.call_tool("list_agents", {}))


async def test_http_mcp_ids_cannot_walk_into_other_routes(
        toren_cli: Any, start_toren: Any, database_url: str, tmp_path: Path) -> None:
    """Issue 35: `cancel_run(run_id="../approvals/<id>/approve?x=")` approved a refund and
    `get_run("../approvals?...")` listed approvals. Every id a tool takes is a UUID by its
    schema (format and pattern) and is checked before any request: the refund stays pending."""
    ledger = tmp_path / "refunds.log"
    env = {"DATABASE_URL": database_url, "REFUNDS_LEDGER": str(ledger), **WITH_MCP}
    token = json.loads(toren_cli("keys", "create", "mcp", "--json", env=env).stdout)["key"]
    shutil.copytree(APPROVAL_DESK, tmp_path / "crews" / "approval-desk")
    server = start_toren("serve", "--workers", "--dir", str(tmp_path / "crews"), "--port", "0",
                         "--json", env=env)
    url = str(server.next_json()["url"])
    async with http_session(url, token) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        for tool in (await mcp.list_tools()).tools:
            for name, schema in tool.input_schema["properties"].items():
                if name.endswith("_id"):
                    shape = next(s for s in schema.get("anyOf", [schema])
                                 if s.get("type") == "string")
                    assert shape["format"] == "uuid", (tool.name, name)
                    assert re.fullmatch(shape["pattern"], ZERO), (tool.name, name)
                    assert not re.search(shape["pattern"], "../approvals"), (tool.name, name)
        run = data(await mcp.call_tool("start_run", {"agent": "approval-desk", "input": "A7"}))
        approvals: list[dict[str, Any]] = []
        for _ in range(300):
            approvals = data(await mcp.call_tool("approvals_list", {}))["approvals"]
            if approvals:
                break
            await asyncio.sleep(0.2)
        [pending] = approvals
        approval = pending["id"]
        walks = [f"../approvals/{approval}/approve?x=", "../approvals?status=pending&x=",
                 f"..%2Fapprovals%2F{approval}%2Fapprove", f"{run['id']}/../../approvals",
                 f"{run['id']}?x=", f"{run['id']}#x", "%2e%2e", "a\x00b", "", ".."]
        for tool, parameter in (("cancel_run", "run_id"), ("get_run", "run_id"),
                                ("get_receipt", "run_id"), ("wait_for_run", "run_id"),
                                ("session_get", "session_id"), ("session_send", "session_id"),
                                ("approve", "approval_id"), ("deny", "approval_id"),
                                ("approvals_list", "run_id")):
            for walk in walks:
                arguments = {parameter: walk} | ({"text": "hi"} if tool == "session_send"
                                                 else {})
                assert parameter in error_text(await mcp.call_tool(tool, arguments)), (
                    tool, walk)
        # resources: the SDK matches no template for a traversal; what it does match is checked
        for uri, expected in (
                (f"toren://runs/..%2Fapprovals%2F{approval}%2Fapprove/receipt",
                 "Unknown resource"),
                ("toren://runs/%2e%2e/receipt", "Unknown resource"),
                ("toren://runs/a%3Fb/receipt", "invalid_id: run id 'a?b' is not a run id"),
                ("toren://runs/not-a-run/receipt", "invalid_id"),
                ("toren://sessions/%2e%2e%3F/transcript", "invalid_id: session id"),
                ("toren://sessions/x%23y/transcript", "invalid_id")):
            with pytest.raises(MCPError) as refused:
                await mcp.read_resource(uri)
            assert expected in str(refused.value), (uri, refused.value)
        # nothing was decided, nothing cancelled; the real ids still work
        assert data(await mcp.call_tool("approvals_list", {}))["approvals"][0][
            "status"] == "pending"
        assert data(await mcp.call_tool("get_run", {"run_id": run["id"]}))[
            "status"] == "awaiting_approval"
        assert not ledger.exists() or ledger.read_text() == ""
        stale = await mcp.call_tool("edit_approval", {
            "approval_id": approval, "arguments": {"order_id": "A7", "amount_eur": 2},
            "digest": "0" * 64})
        assert "approval_stale" in error_text(stale)
        answered = data(await mcp.call_tool("answer_approval", {
            "approval_id": approval.upper(), "answer": "Refunded by phone.",
            "digest": pending["digest"], "reason": "a test"}))
        assert (answered["status"], answered["answer"]) == ("answered", "Refunded by phone.")


async def test_http_mcp_on_toren_dev_without_keys(start_toren: Any, database_url: str,
                                                  tmp_path: Path) -> None:
    """Local `toren dev` needs no key; a caller cannot redirect the tools' own API calls; what
    the transport cannot take is refused as every route refuses, in the API's JSON error."""
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, **WITH_MCP})
    url = str(dev.next_json()["url"])
    forged = {"X-Toren-MCP-Self-URL": "http://127.0.0.1:9"}  # nothing listens there
    async with streamable_http_client(url + "/mcp", http_client=httpx2.AsyncClient(
            headers=forged, timeout=60)) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        agents = data(await mcp.call_tool("list_agents", {}))
        assert [agent["name"] for agent in agents["agents"]] == ["crew"]
        started = data(await mcp.call_tool("start_run", {"agent": "crew", "input": "dev"}))
        run = data(await mcp.call_tool("wait_for_run", {"run_id": started["id"],
                                                        "timeout_s": 60}))
        assert run["status"] == "completed"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx2.AsyncClient(timeout=60) as http:
        as_text = await http.post(url + "/mcp", content=json.dumps(message), headers={
            "Content-Type": "text/plain", "Accept": "application/json, text/event-stream"})
        json_only = await http.post(url + "/mcp", json=message,
                                    headers={"Accept": "application/json"})
    assert as_text.status_code == 415
    assert as_text.json()["error"]["code"] == "unsupported_media_type"
    assert "Content-Type: application/json" in as_text.json()["error"]["message"]
    assert json_only.status_code == 406
    assert json_only.json()["error"]["code"] == "not_acceptable"
    assert "text/event-stream" in json_only.json()["error"]["message"]


# -- the kernel without toren-mcp ----------------------------------------------------------------


def test_the_kernel_does_not_depend_on_the_mcp_sdk() -> None:
    """`pip install toren` brings no mcp SDK (nor its starlette, uvicorn, httpx...):
    toren-mcp does."""
    kernel = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[\s<>=!~\[;]", dependency, maxsplit=1)[0].lower()
             for dependency in kernel["dependencies"]}
    assert not names & {"mcp", "starlette", "uvicorn"}, names
    plugin = tomllib.loads((ROOT / "plugins/toren-mcp/pyproject.toml").read_text())["project"]
    assert "mcp>=2.3,<3" in plugin["dependencies"]
    assert plugin["entry-points"]["toren"] == {"mcp": "toren_mcp.plugin"}
    assert "-e ./plugins/toren-mcp" in (ROOT / "requirements/dev.txt").read_text().splitlines()


def test_toren_mcp_without_the_plugin_says_what_to_install(
        toren_cli: TorenCli, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # installed in this environment, but not loaded (the tests load only the built-ins)
    for args in (["mcp"], ["mcp", "--help"]):
        result = toren_cli(*args)
        assert result.returncode == 1, result.stdout
        assert "the MCP channel (toren-mcp) is installed but not loaded" in result.stderr
        assert "No such command" not in result.stderr
    assert " mcp " not in toren_cli("--help").stdout  # not offered when it cannot run
    # not installed at all, as after `pip install toren` alone
    found = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name == "toren-mcp":
            raise metadata.PackageNotFoundError(name)
        return found(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "")
    with pytest.raises(SystemExit) as exited:
        main(["mcp", "--json"])
    assert exited.value.code == 1
    assert json.loads(capsys.readouterr().out) == {"error": {
        "code": "plugin_not_installed",
        "message": "the MCP channel is not installed: pip install toren-mcp"}}


def test_toren_mcp_with_the_plugin(toren_cli: TorenCli) -> None:
    result = toren_cli("mcp", "--help", env=WITH_MCP)
    assert result.returncode == 0, result.stderr
    assert "Serve MCP on stdin/stdout" in result.stdout
    found = json.loads(toren_cli("plugins", "--json", env=WITH_MCP).stdout)
    mcp = next(plugin for plugin in found["plugins"] if plugin["name"] == "mcp")
    assert mcp["distribution"] == "toren-mcp"
    assert mcp["hooks"] == ["register_tool_sources", "register_routes"]
    assert mcp["toolSources"] == ["mcpServers"] and mcp["api"] == ">=1.5,<2"
    # `toren mcp` is a toren.commands entry point (plugin API 1.5), listed by `toren --help`
    assert {"name": "mcp", "target": "toren_mcp.cli:mcp", "distribution": "toren-mcp",
            "version": mcp["version"]} in found["commands"]
    listing = toren_cli("--help", env=WITH_MCP)
    assert re.search(r"│ mcp +Serve MCP on stdin/stdout", listing.stdout), listing.stdout


def test_no_mcp_route_without_the_plugin(start_toren: Any, database_url: str,
                                         tmp_path: Path) -> None:
    """The kernel's server alone has no /mcp: a plain 404, as for any unknown path."""
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    url = str(dev.next_json()["url"])
    status, body, _ = call(f"{url}/mcp", "POST", {"jsonrpc": "2.0", "id": 1,
                                                   "method": "tools/list"},
                           {"Accept": "application/json, text/event-stream"})
    assert status == 404, body
