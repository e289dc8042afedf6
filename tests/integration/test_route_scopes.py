"""Every route of the OpenAPI document x every role: the API answers 403 ``forbidden`` exactly
when the key lacks the scope ``toren.server.scopes`` names for the route; keys limited to some
agents see and touch only theirs; expired keys are refused. One app on a real store serves
all the requests."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from toren.core.scopes import ROLES, SCOPES
from toren.host.runtime import Runtime
from toren.schemas import load_schema
from toren.seams.routes import AUTHENTICATED
from toren.server.app import create_app
from toren.server.scopes import EVERY_AGENT, PUBLIC, route_scope
from toren.testing import serve_on_free_port, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]
OPENAPI = load_schema("openapi.json")
OPERATIONS = [(method.upper(), path, operation) for path, item in OPENAPI["paths"].items()
              for method, operation in item.items() if method != "parameters"]


@dataclass
class Served:
    runtime: Runtime
    url: str
    tokens: dict[str, str]
    granted: dict[str, frozenset[str]]
    runs: dict[str, str]

    @property
    def runtime_roles(self) -> dict[str, str]:
        return {role: "operator" if role == "crew-only" else role for role in self.tokens}


@pytest.fixture
async def served(toren_runtime: MakeRuntime, tmp_path: Path) -> AsyncIterator[Served]:
    agents = tmp_path / "agents"
    runtime = await toren_runtime([write_agent_dir(agents, "crew"),
                                   write_agent_dir(agents, "other")],
                                  load_plugins=("toren-mcp",))
    tokens: dict[str, str] = {}
    granted: dict[str, frozenset[str]] = {}
    for role in ROLES:
        key, tokens[role] = await runtime.keys.create(f"{role}-key", role=role)
        granted[role] = key.granted
    key, tokens["custom"] = await runtime.keys.create(
        "custom-key", role="custom", scopes=["runs:read", "metrics:read"])
    granted["custom"] = key.granted
    # an operator limited to crew: the operator's answers, but for what acts on every agent
    key, tokens["crew-only"] = await runtime.keys.create("crew-only", role="operator",
                                                         agents=["crew"])
    granted["crew-only"] = key.granted
    runs = {agent: await runtime.start_run(agent, "hello") for agent in ("crew", "other")}
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    try:
        yield Served(runtime, url, tokens, granted, runs)
    finally:
        await runner.cleanup()


def concrete(path: str) -> str:
    """``path`` with its parameters filled with values that name nothing (so the handler,
    when the scope lets the request through, answers 4xx without changing anything)."""
    values = {"agent": "crew", "name": "nothing-here", "asset": "none.css"}
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], str(uuid.uuid4())), path)


def test_every_operation_names_the_scope_of_its_route() -> None:
    for method, path, operation in OPERATIONS:
        declared = operation.get("x-toren-scope")
        assert declared is not None, f"{method} {path}: no x-toren-scope in openapi.json"
        if path == "/mcp":  # a plugin's route: declared on its handler (route_scope)
            assert declared == AUTHENTICATED
            continue
        assert route_scope(method, path) == declared, (
            f"{method} {path}: toren/server/scopes.py says {route_scope(method, path)!r}, "
            f"openapi.json {declared!r}")
        assert declared in (PUBLIC, AUTHENTICATED, *SCOPES)


async def test_each_role_is_refused_exactly_the_routes_outside_its_scopes(
        served: Served) -> None:
    served_routes = {f"{route.method} {route.resource.canonical}"
                     for route in create_app(served.runtime).router.routes()
                     if route.method != "HEAD" and route.resource is not None}
    checked = 0
    async with aiohttp.ClientSession() as http:
        for method, path, operation in OPERATIONS:
            if f"{method} {path}" not in served_routes:
                continue  # a route of a plugin this test did not load
            scope = operation["x-toren-scope"]
            for role, token in served.tokens.items():
                headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
                body: Any = {} if method in ("POST", "PUT", "PATCH") else None
                async with http.request(method, served.url + concrete(path), json=body,
                                        headers=headers, timeout=aiohttp.ClientTimeout(10),
                                        ) as answer:
                    data = await answer.json() if answer.content_type == "application/json" \
                        else None
                    refused = answer.status == 403 and data["error"]["code"] == "forbidden"
                expected = scope not in (PUBLIC, AUTHENTICATED) and \
                    scope not in served.granted[role]
                if role == "crew-only" and (method, path) in EVERY_AGENT:
                    expected = True
                assert refused == expected, (method, path, role, answer.status, data)
                if refused and (method, path) not in EVERY_AGENT:
                    message = data["error"]["message"]
                    assert f"needs the scope {scope}" in message
                    assert f"role {served.runtime_roles[role]}" in message
                checked += 1
    assert checked >= len(OPERATIONS) * 3


async def test_keyless_local_use_allows_everything(served: Served) -> None:
    runner, url = await serve_on_free_port(create_app(served.runtime, require_keys=False))
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("/me", "/fleet", "/runs", "/approvals"):
                async with http.get(url + path) as answer:
                    assert answer.status == 200, path
            async with http.get(url + "/me") as answer:
                me = await answer.json()
        assert me["actor"]["kind"] == "anonymous" and set(me["scopes"]) == set(SCOPES)
    finally:
        await runner.cleanup()


async def test_me_says_what_the_key_may_do(served: Served) -> None:
    async with aiohttp.ClientSession() as http, http.get(
            f"{served.url}/me",
            headers={"Authorization": f"Bearer {served.tokens['approver']}"}) as answer:
        me = await answer.json()
    assert (me["name"], me["role"], me["agents"], me["expires_at"]) == (
        "approver-key", "approver", None, None)
    assert set(me["scopes"]) == ROLES["approver"] and me["actor"]["kind"] == "key"


async def test_a_key_limited_to_an_agent_sees_and_touches_only_its_own(served: Served) -> None:
    token = served.tokens["crew-only"]
    headers = {"Authorization": f"Bearer {token}"}
    admin = {"Authorization": f"Bearer {served.tokens['admin']}"}
    crew_run, other_run = served.runs["crew"], served.runs["other"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{served.url}/runs", headers=headers) as answer:
            assert {run["agent"] for run in (await answer.json())["runs"]} == {"crew"}
        async with http.get(f"{served.url}/runs", headers=admin) as answer:
            assert {run["agent"] for run in (await answer.json())["runs"]} == {"crew", "other"}
        async with http.get(f"{served.url}/agents", headers=headers) as answer:
            assert [a["name"] for a in (await answer.json())["agents"]] == ["crew"]
        async with http.get(f"{served.url}/runs/{crew_run}", headers=headers) as answer:
            assert answer.status == 200
        # another agent's objects answer as if they did not exist: no existence leaks
        for method, path, body in (
                ("GET", f"/runs/{other_run}", None), ("GET", f"/runs/{other_run}/events", None),
                ("POST", f"/runs/{other_run}/cancel", {}), ("GET", "/agents/other", None),
                ("GET", "/runs?agent=other", None), ("GET", "/schedules/other/daily", None),
                ("POST", "/runs", {"agent": "other", "input": "hi"}),
                ("POST", "/sessions", {"agent": "other"})):
            async with http.request(method, served.url + path, json=body,
                                    headers=headers) as answer:
                assert answer.status == 404, (method, path, await answer.text())
                assert str(other_run) not in (await answer.json())["error"]["message"] or \
                    "served here" in (await answer.json())["error"]["message"]
        async with http.get(f"{served.url}/runs/{other_run}", headers=admin) as answer:
            assert answer.status == 200  # the admin key still sees it
        async with http.post(f"{served.url}/archive", json={"dry_run": True},
                             headers=headers) as answer:  # acts on every agent: refused
            assert answer.status == 403
            assert "acts on every agent" in (await answer.json())["error"]["message"]


async def test_an_expired_key_is_refused_with_the_plain_401(served: Served,
                                                            database_url: str) -> None:
    key, token = await served.runtime.keys.create(
        "short-lived", role="viewer", expires_at=datetime.now(UTC) + timedelta(hours=1))
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{served.url}/runs", headers=headers) as answer:
            assert answer.status == 200
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE toren_control.keys SET expires_at = now() - interval '1 s' "
                         "WHERE id = %s", (key.id,))
        # a fresh server: the running one trusts a verified key for up to CACHE_TTL_S
        runner, url = await serve_on_free_port(create_app(served.runtime))
        try:
            async with http.get(f"{url}/runs", headers=headers) as answer:
                assert answer.status == 401
                assert "revoked or expired" in (await answer.json())["error"]["message"]
        finally:
            await runner.cleanup()
    assert key.id not in {k.id for k in await served.runtime.keys.active()}


async def test_a_plugin_route_without_a_scope_needs_an_admin_key(served: Served) -> None:
    from aiohttp import web

    app = create_app(served.runtime)

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"hello": True})

    hello.__module__ = "some_plugin.routes"
    app.router.add_get("/hello", hello)
    runner, url = await serve_on_free_port(app)
    try:
        async with aiohttp.ClientSession() as http:
            for role, status in (("admin", 200), ("operator", 403), ("viewer", 403)):
                async with http.get(f"{url}/hello", headers={
                        "Authorization": f"Bearer {served.tokens[role]}"}) as answer:
                    assert answer.status == status, role
    finally:
        await runner.cleanup()


async def test_mcp_tools_need_the_scope_of_the_route_they_call(served: Served) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    def session(role: str) -> Any:
        return streamable_http_client(served.url + "/mcp", http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {served.tokens[role]}"}, timeout=30))

    async with session("viewer") as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()  # /mcp itself needs only a valid key
        listed = await mcp.call_tool("list_agents", {})
        assert not listed.is_error
        refused = await mcp.call_tool("start_run", {"agent": "crew", "input": "hi"})
        assert refused.is_error
        text = refused.content[0].text
        assert "forbidden" in text and "needs the scope runs:write" in text, text
        cancel = await mcp.call_tool("cancel_run", {"run_id": served.runs["crew"]})
        assert cancel.is_error and "runs:write" in cancel.content[0].text
        fleet = await mcp.call_tool("fleet", {})  # GET /fleet: a viewer reads it
        assert not fleet.is_error, fleet.content
        assert {"workers", "agents", "unserved", "rate_limits"} <= set(
            json.loads(fleet.content[0].text))
    async with session("approver") as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        fleet = await mcp.call_tool("fleet", {})
        assert fleet.is_error and "needs the scope fleet:read" in fleet.content[0].text
    async with session("operator") as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        started = await mcp.call_tool("start_run", {"agent": "crew", "input": "hi"})
        assert not started.is_error, started.content


async def test_the_client_reads_me_and_raises_forbidden_naming_the_scope(
        served: Served) -> None:
    from toren.client import TorenAPIError, TorenClient

    async with TorenClient(served.url, served.tokens["viewer"]) as client:
        assert (await client.me())["role"] == "viewer"
        try:
            await client.cancel_run(served.runs["crew"])
        except TorenAPIError as exc:
            assert (exc.status, exc.code) == (403, "forbidden")
            assert "needs the scope runs:write" in exc.message
        else:
            raise AssertionError("a viewer key cancelled a run")
