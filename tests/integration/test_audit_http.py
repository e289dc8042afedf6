"""The audit trail over real HTTP (an in-process server on a real socket, real Postgres): every
state-changing call recorded once with its actor, target and outcome (refused and failed ones
too), ``GET /audit``'s filters and pages, its hostile query parameters, and a route missing
from the action table failing here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import toren
from toren.config import Settings
from toren.host.runtime import Runtime
from toren.schemas import load_schema
from toren.server.app import create_app
from toren.server.audit import ROUTE_ACTIONS
from toren.testing import serve_on_free_port, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]
#: Routes that change state but record nothing themselves: ``/mcp``'s tools call the routes
#: above with the caller's key, and those calls are recorded (source ``mcp``).
NOT_RECORDED_ITSELF = {("POST", "/mcp")}


@pytest.fixture
async def served(toren_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> AsyncIterator[tuple[str, Runtime, dict[str, str]]]:
    # each model step takes a second: a run started here is still going when a test cancels
    # it (on a loaded machine it could finish first, and the cancel say "completed")
    monkeypatch.setenv("TOREN_SCRIPTED_DELAY", "1.0")
    runtime = await toren_runtime([write_agent_dir(tmp_path, "clerk")])
    key, token = await runtime.keys.create("ops-lead")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    yield url, runtime, {"Authorization": f"Bearer {token}", "User-Agent": "audit-test/1",
                         "key_id": key.id}
    await runner.cleanup()


async def call(url: str, method: str, path: str, headers: dict[str, str],
               body: Any = None) -> tuple[int, dict[str, Any]]:
    sent = {k: v for k, v in headers.items() if k != "key_id"}
    async with aiohttp.ClientSession() as http, http.request(
            method, f"{url}{path}", json=body, headers=sent) as answer:
        return answer.status, await answer.json()


async def entries(url: str, headers: dict[str, str], **filters: Any) -> list[dict[str, Any]]:
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    status, page = await call(url, "GET", f"/audit?{query}", headers)
    assert status == 200, page
    return list(page["entries"])


def test_every_state_changing_route_of_the_openapi_document_records_an_action() -> None:
    openapi = load_schema("openapi.json")
    changing = {(method.upper(), path) for path, item in openapi["paths"].items()
                for method in item if method in ("post", "put", "patch", "delete")}
    missing = changing - set(ROUTE_ACTIONS) - NOT_RECORDED_ITSELF
    assert not missing, f"state-changing routes without an audit action: {sorted(missing)}"
    assert set(ROUTE_ACTIONS) <= changing  # and none listed that the API does not have


async def test_calls_are_recorded_once_with_actor_target_and_outcome(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, _, headers = served
    status, started = await call(url, "POST", "/runs", headers, {"agent": "clerk",
                                                                  "input": "file it",
                                                                  "priority": 5})
    assert status == 201
    run_id = started["id"]
    status, _ = await call(url, "POST", f"/runs/{run_id}/cancel", headers,
                           {"reason": "not needed"})
    assert status == 200
    missing_run = "00000000-0000-4000-8000-000000000000"
    status, _ = await call(url, "POST", f"/runs/{missing_run}/cancel", headers, {})
    assert status == 404
    status, _ = await call(url, "POST", "/runs", headers, {"agent": "clerk"})  # no input
    assert status == 400
    # no valid key: refused before anyone is known, and not recorded
    status, _ = await call(url, "POST", f"/runs/{run_id}/cancel",
                           {"Authorization": "Bearer toren_00000000_" + "x" * 40}, {})
    assert status == 401
    # a read is not recorded
    assert (await call(url, "GET", f"/runs/{run_id}", headers))[0] == 200

    found = await entries(url, headers, actor="ops-lead")
    assert [(e["action"], e["outcome"], e["status"]) for e in found] == [
        ("run.start", "invalid_body", 400),
        ("run.cancel", "run_not_found", 404),
        ("run.cancel", "ok", 200),
        ("run.start", "ok", 201)]
    start, cancel = found[3], found[2]
    assert start["actor"] == {"kind": "key", "id": headers["key_id"], "name": "ops-lead"}
    assert (start["source"], start["agent"], start["run_id"]) == ("http", "clerk", run_id)
    assert start["details"].get("priority") == 5  # the run's own priority
    assert (start["remote"], start["user_agent"]) == ("127.0.0.1", "audit-test/1")
    assert cancel["run_id"] == run_id and cancel["details"].get("status") == "cancelled"
    assert found[1]["run_id"] == missing_run
    # the filters: by key id, action and its start, run, outcome
    assert len(await entries(url, headers, actor=headers["key_id"])) == 4
    assert [e["id"] for e in await entries(url, headers, action="run.start")] == [
        found[0]["id"], start["id"]]
    assert len(await entries(url, headers, action="run")) == 4
    assert await entries(url, headers, action="approval") == []
    assert [e["id"] for e in await entries(url, headers, run=run_id)] == [cancel["id"],
                                                                         start["id"]]
    assert [e["id"] for e in await entries(url, headers, outcome="run_not_found")] == [
        found[1]["id"]]
    assert len(await entries(url, headers, since="1h")) == 4
    assert await entries(url, headers, until="2001-01-01") == []
    assert await entries(url, headers, since="1h", until="2h") == []  # an empty window
    assert await entries(url, headers, until="4696516d") == []  # before year 1: no 500


async def test_pages_follow_the_cursor_to_the_end(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, _, headers = served
    for n in range(3):
        await call(url, "POST", "/runs", headers, {"agent": "clerk", "input": f"n{n}"})
    seen: list[str] = []
    cursor = ""
    while True:
        status, page = await call(url, "GET", f"/audit?limit=2&cursor={cursor}", headers)
        assert status == 200
        seen += [e["id"] for e in page["entries"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 3
    assert seen == sorted(seen, key=int, reverse=True)


@pytest.mark.parametrize(("query", "names"), [
    ("since=yesterday", "since"), ("until=2026-13-45", "until"), ("limit=100000", "limit"),
    ("limit=0", "limit"), ("limit=ten", "limit"), ("action=Run%21", "action"),
    ("actor=a%00b", "actor"), ("agent=" + "x" * 300, "agent"), ("colour=red", "colour"),
    ("action=run..", "action"),
])
async def test_hostile_query_parameters_are_a_400_naming_the_parameter(
        served: tuple[str, Runtime, dict[str, str]], query: str, names: str) -> None:
    url, _, headers = served
    status, body = await call(url, "GET", f"/audit?{query}", headers)
    assert status == 400
    assert body["error"]["code"] == "invalid_audit_query"
    assert names in body["error"]["message"]


async def test_a_malformed_cursor_is_a_400(served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, _, headers = served
    for cursor in ("garbage", "eyJhdWRpdF9iZWZvcmUiOiAtMX0", "W10"):
        status, body = await call(url, "GET", f"/audit?cursor={cursor}", headers)
        assert (status, body["error"]["code"]) == (400, "invalid_cursor")


async def test_a_cross_site_call_is_recorded_refused_and_a_failed_audit_write_fails_nothing(
        toren_runtime: MakeRuntime, tmp_path: Path, database_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    import psycopg

    runtime = await toren_runtime([write_agent_dir(tmp_path, "clerk")])
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        page = {"Origin": "https://evil.example", "Content-Type": "application/json"}
        status, body = await call(url, "POST", "/runs", page, {"agent": "clerk", "input": "x"})
        assert (status, body["error"]["code"]) == (403, "cross_site_request")
        denied = (await runtime.audit.page(_query(action="run.start"))).items
        assert [(r.entry.outcome, r.entry.status, r.entry.actor_kind) for r in denied] == [
            ("cross_site_request", 403, "anonymous")]

        # the audit table gone: the run still starts, and the log says loudly what was lost
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE toren_control.audit RENAME TO audit_away")
        try:
            status, started = await call(url, "POST", "/runs", {},
                                         {"agent": "clerk", "input": "y"})
            assert status == 201
            assert await runtime.get_run(started["id"]) is not None
            assert "AUDIT WRITE FAILED: run.start by anonymous:anonymous" in caplog.text
        finally:
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute("ALTER TABLE toren_control.audit_away RENAME TO audit")
    finally:
        await runner.cleanup()


def _query(**filters: Any) -> Any:
    from toren.core.audit import AuditQuery

    return AuditQuery(**filters)


async def test_mcp_tools_are_recorded_as_mcp_by_the_callers_key(
        toren_runtime: MakeRuntime, tmp_path: Path) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    runtime = await toren_runtime([write_agent_dir(tmp_path, "clerk")],
                                  load_plugins=("toren-mcp",))
    key, token = await runtime.keys.create("assistant")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    try:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with streamable_http_client(url + "/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            started = await mcp.call_tool("start_run", {"agent": "clerk", "input": "x"})
            run_id = json.loads(started.content[0].text)["id"]
            await mcp.call_tool("cancel_run", {"run_id": run_id, "reason": "by a tool"})
            await mcp.call_tool("list_runs", {})  # a read: not recorded
    finally:
        await runner.cleanup()
    found = (await runtime.audit.page(_query(actor=key.id))).items
    assert [(r.entry.action, r.entry.source, r.entry.outcome, r.entry.run_id)
            for r in found] == [("run.cancel", "mcp", "ok", run_id),
                                ("run.start", "mcp", "ok", run_id)]
    assert {r.entry.user_agent for r in found} == {f"toren-mcp/{toren.__version__}"}


async def test_toren_audit_with_url_reads_the_deployments_trail(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    from toren.cli.operator import RemoteOperator
    from toren.client import TorenClient

    url, _, headers = served
    await call(url, "POST", "/runs", headers, {"agent": "clerk", "input": "x"})
    token = headers["Authorization"].removeprefix("Bearer ")
    operator = RemoteOperator(TorenClient(url, token))
    try:
        found = await operator.audit({"actor": "ops-lead", "action": "run", "agent": None,
                                      "run": None, "outcome": "ok", "since": "1h",
                                      "until": None, "limit": 10})
    finally:
        await operator.aclose()
    assert [(e["action"], e["actor"]["name"], e["agent"]) for e in found] == [
        ("run.start", "ops-lead", "clerk")]


async def test_a_call_a_keys_scopes_refuse_is_recorded_as_forbidden_and_only_admins_read(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, runtime, admin = served
    _, started = await call(url, "POST", "/runs", admin, {"agent": "clerk", "input": "x"})
    for role in ("viewer", "operator"):
        key, token = await runtime.keys.create(f"a-{role}", role=role)
        bearer = {"Authorization": f"Bearer {token}"}
        status, body = await call(url, "GET", "/audit", bearer)
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert "audit:read" in body["error"]["message"]
        if role == "viewer":
            status, _ = await call(url, "POST", f"/runs/{started['id']}/cancel", bearer, {})
            assert status == 403
            [refused] = await entries(url, admin, actor=key.id)
            assert (refused["action"], refused["outcome"], refused["status"],
                    refused["run_id"]) == ("run.cancel", "forbidden", 403, started["id"])
    assert (await runtime.get_run(started["id"])).status != "cancelled"


async def test_remote_is_the_client_behind_a_trusted_proxy_and_the_peer_otherwise(
        toren_runtime: MakeRuntime, tmp_path: Path) -> None:
    async def remotes(trusted: str) -> list[str | None]:
        runtime = await toren_runtime(
            [write_agent_dir(tmp_path / trusted.replace("/", "_"), "clerk")],
            trusted_proxies=Settings.from_env({"TOREN_TRUSTED_PROXIES": trusted}
                                              ).trusted_proxies)
        name = f"proxied-{len(trusted)}"
        _, token = await runtime.keys.create(name)
        runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
        headers = {"Authorization": f"Bearer {token}"}
        try:
            for forwarded in ("6.6.6.6, 203.0.113.9", "not-an-address", "[2001:db8::5]:443"):
                status, _ = await call(url, "POST", "/runs", headers | {
                    "X-Forwarded-For": forwarded}, {"agent": "clerk", "input": "x"})
                assert status == 201
            return [e["remote"] for e in reversed(await entries(url, headers, actor=name,
                                                                action="run.start"))]
        finally:
            await runner.cleanup()

    # Toren behind a proxy on 127.0.0.1 it trusts: the right-most hop the proxy wrote is the
    # client; a hop that is not an address ends what can be believed (the proxy itself)
    assert await remotes("127.0.0.0/8, 10.0.0.0/16") == ["203.0.113.9", "127.0.0.1",
                                                         "2001:db8::5"]
    # no proxy trusted (the default): a client's own X-Forwarded-For is ignored
    assert await remotes("") == ["127.0.0.1"] * 3
