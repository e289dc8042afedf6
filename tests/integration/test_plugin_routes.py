"""``register_routes``: a plugin's HTTP routes join the API behind its keys and browser guard,
and a route the API already has is an error naming the plugin."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import toren
from toren.errors import PluginError
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]


class Hello:
    """A plugin adding ``GET /hello``, answering with the agents of the runtime it was given."""

    @toren.hookimpl
    def register_routes(self, app: web.Application, runtime: Any) -> None:
        async def hello(request: web.Request) -> web.Response:
            return web.json_response({"agents": sorted(runtime.agents)})

        app.router.add_get("/hello", hello)


class Shadow:
    """A plugin adding a route the API already has."""

    @toren.hookimpl
    def register_routes(self, app: web.Application) -> None:
        async def runs(request: web.Request) -> web.Response:
            return web.Response()

        app.router.add_post("/runs", runs)


async def test_plugin_routes_are_served_behind_the_api_keys(
        toren_runtime: MakeRuntime, tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path / "agents", "crew")])
    runtime.plugins.add_plugin(Hello(), "hello")
    assert "register_routes" in runtime.plugins.info["hello"].hooks
    _, token = await runtime.store.create_key("routes")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    try:
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                async with http.get(f"{url}/hello", headers=headers) as answer:
                    assert answer.status == 401
                    assert (await answer.json())["error"]["code"] == "unauthorized"
            async with http.get(f"{url}/hello",
                                headers={"Authorization": f"Bearer {token}"}) as answer:
                assert answer.status == 200
                assert await answer.json() == {"agents": ["crew"]}
    finally:
        await runner.cleanup()


async def test_a_plugin_route_the_api_has_is_an_error_naming_the_plugin(
        toren_runtime: MakeRuntime, tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path / "agents", "crew")])
    runtime.plugins.add_plugin(Shadow(), "shadow")
    with pytest.raises(PluginError, match=r"plugin shadow .*POST /runs"):
        create_app(runtime, require_keys=False)
