"""API keys end to end: the serving policy, the auth middleware over the real store, the
``toren keys`` commands and ``toren serve`` in real subprocesses."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.conftest import TorenCli, TorenProcess, one_line, wait_until
from tests.durable import plugin_host
from toren.cli.serve import serve_api
from toren.config import Settings
from toren.errors import ConfigError
from toren.host.runtime import Runtime
from toren.keys import NoApiKeys
from toren.seams.store import KeyStore
from toren.server.auth import API_KEY, auth_middleware, is_loopback, keys_required
from toren.server.errors import error_middleware
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)

StartToren = Callable[..., TorenProcess]
KEY = re.compile(r"toren_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")
NO_KEYS = "no API keys exist: create one with `toren keys create NAME` before serving on {}"


# -- the policy (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LocalHost", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("192.168.1.10", False),
    ("128.0.0.1", False), ("example.com", False), ("localhost.example.com", False),
])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("command", "host", "env", "required"), [
    ("dev", "127.0.0.1", {}, False),
    ("dev", "localhost", {}, False),
    ("dev", "::1", {"TOREN_REQUIRE_KEYS": "1"}, True),
    ("dev", "127.0.0.1", {"TOREN_REQUIRE_KEYS": "0"}, False),
    ("dev", "127.0.0.1", {"TOREN_ALLOW_NO_KEYS": "1"}, False),
    ("dev", "0.0.0.0", {}, True),
    ("dev", "0.0.0.0", {"TOREN_ALLOW_NO_KEYS": "1"}, True),  # only loopback may opt out
    ("dev", "10.0.0.5", {}, True),
    ("serve", "127.0.0.1", {}, True),
    ("serve", "localhost", {"TOREN_ALLOW_NO_KEYS": "1"}, False),
    ("serve", "127.0.0.1", {"TOREN_ALLOW_NO_KEYS": "1", "TOREN_REQUIRE_KEYS": "1"}, True),
    ("serve", "0.0.0.0", {"TOREN_ALLOW_NO_KEYS": "1"}, True),
    ("serve", "::", {}, True),
])
def test_when_keys_are_required(command: Any, host: str, env: dict[str, str],
                                required: bool) -> None:
    assert keys_required(command, host, env) is required


# -- the start-up check: `toren serve` refuses before anything listens ---------------------------


class FakeServe:
    """Stands in for ``toren.cli.dev.serve``: records that serving would have started."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, runtime: Runtime, *, sockets: list[socket.socket],
                       **options: Any) -> None:
        # the port was bound before the key check, so a port in use fails first
        assert sockets and all(sock.getsockname()[1] for sock in sockets)
        self.calls.append(options)


def unstarted_runtime(database_url: str, tmp_path: Path) -> Runtime:
    settings = Settings(database_url=database_url, home=tmp_path / "home", load_plugins=())
    return Runtime(settings=settings, plugins=plugin_host(), agents=[])


async def serve_with(runtime: Runtime, host: str, env: Mapping[str, str]) -> FakeServe:
    fake = FakeServe()
    await serve_api(runtime, host=host, port=0, as_json=True, env=env, serve_http=fake)
    return fake


async def test_serve_refuses_without_an_active_key_before_serving(make_runtime,
                                                                  database_url: str,
                                                                  tmp_path: Path) -> None:
    runtime = unstarted_runtime(database_url, tmp_path)
    for host, env in (("0.0.0.0", {}), ("0.0.0.0", {"TOREN_ALLOW_NO_KEYS": "1"})):
        fake = FakeServe()
        with pytest.raises(NoApiKeys) as raised:
            await serve_api(runtime, host=host, port=0, as_json=True, env=env, serve_http=fake)
        assert raised.value.message == NO_KEYS.format(host)
        assert fake.calls == []  # never got as far as listening

    with pytest.raises(ConfigError, match=r"^cannot listen on 192\.0\.2\.1:0: "):
        # an address of no interface here (TEST-NET-1) fails when binding, before the key check
        await serve_api(runtime, host="192.0.2.1", port=0, as_json=True, env={},
                        serve_http=FakeServe())

    with pytest.raises(NoApiKeys, match=re.escape(
            NO_KEYS.format("127.0.0.1") + " (or set TOREN_ALLOW_NO_KEYS=1 to try it locally "
            "without keys)")):
        await serve_with(runtime, "127.0.0.1", {})
    assert (await serve_with(runtime, "127.0.0.1", {"TOREN_ALLOW_NO_KEYS": "1"})).calls == [
        {"host": "127.0.0.1", "port": 0, "as_json": True, "workers": False, "command": "serve"}]

    store = (await make_runtime(agents=[], workers=False)).store
    revoked, _ = await store.create_key("old")
    await store.revoke_key(revoked.id)
    with pytest.raises(NoApiKeys):  # a revoked key does not count
        await serve_with(runtime, "0.0.0.0", {})

    await store.create_key("ci")
    fake = await serve_with(runtime, "0.0.0.0", {})
    assert fake.calls == [{"host": "0.0.0.0", "port": 0, "as_json": True, "workers": False,
                          "command": "serve"}]


# -- the middleware over the real store ----------------------------------------------------------


def small_app(store: KeyStore, **options: Any) -> web.Application:
    """Public and private routes behind ``auth_middleware``, as ``create_app`` will have them."""

    async def public(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def whoami(request: web.Request) -> web.Response:
        key = request.get(API_KEY)
        return web.json_response({"key": key.name if key else None})

    app = web.Application(middlewares=[error_middleware,
                                       auth_middleware(store.verify_key, **options)])
    app.router.add_get("/healthz", public)
    app.router.add_get("/openapi.json", public)
    app.router.add_get("/agents", whoami)
    app.router.add_post("/runs", whoami)
    return app


async def request(client: TestClient, path: str, key: str | None = None, *,
                  header: str | None = None, method: str = "GET") -> tuple[int, Any, str]:
    headers = {"Authorization": header or f"Bearer {key}"} if key or header else {}
    async with client.request(method, path, headers=headers) as response:
        return response.status, await response.json(), response.headers.get(
            "WWW-Authenticate", "")


async def test_the_middleware_requires_a_valid_key_from_the_cli(
        make_runtime, toren_cli: TorenCli, database_url: str) -> None:
    created = toren_cli("keys", "create", "ci", "--json", env={"DATABASE_URL": database_url})
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["key"]
    store = (await make_runtime(agents=[], workers=False)).store

    async with TestClient(TestServer(small_app(store, cache_ttl_s=0.2))) as client:
        for path in ("/healthz", "/openapi.json"):
            assert (await request(client, path))[:2] == (200, {"status": "ok"})

        status, body, challenge = await request(client, "/agents")
        assert (status, challenge) == (401, "Bearer")
        assert body["error"]["code"] == "unauthorized"
        assert "Authorization: Bearer <key>" in body["error"]["message"]
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}

        prefix = json.loads(created.stdout)["prefix"]
        for bad in (f"Basic {token}", "Bearer", "Bearer ", f"Bearer {token}x",
                    f"Bearer {prefix}_{'A' * 43}", "Bearer not-a-key"):
            status, body, challenge = await request(client, "/agents", header=bad)
            assert (status, body["error"]["code"], challenge) == (
                401, "unauthorized", "Bearer"), bad
        status, body, _ = await request(client, "/no/such/route")
        assert status == 401  # unauthenticated callers learn nothing about routes

        assert (await request(client, "/agents", token))[:2] == (200, {"key": "ci"})
        assert (await request(client, "/agents", header=f"bearer {token}"))[0] == 200
        assert (await request(client, "/runs", token, method="POST"))[:2] == (200, {"key": "ci"})
        assert (await request(client, "/healthz", header="Bearer wrong"))[0] == 200

        revoked = toren_cli("keys", "revoke", prefix, env={"DATABASE_URL": database_url})
        assert revoked.returncode == 0, revoked.stderr
        await asyncio.sleep(0.3)  # past the cache's 0.2 s
        assert (await request(client, "/agents", token))[0] == 401

    listed = toren_cli("keys", "list", "--json", env={"DATABASE_URL": database_url})
    [key] = json.loads(listed.stdout)["keys"]
    assert key["last_used_at"] is not None and key["revoked_at"] is not None


async def test_verified_keys_are_cached_and_failures_are_not(
        make_runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    store = (await make_runtime(agents=[], workers=False)).store
    _, token = await store.create_key("hot")
    checked: list[str] = []
    verify = store.verify_key

    async def counting(presented: str) -> Any:
        checked.append(presented)
        return await verify(presented)

    monkeypatch.setattr(store, "verify_key", counting)
    async with TestClient(TestServer(small_app(store, cache_ttl_s=60))) as client:
        for _ in range(5):
            assert (await request(client, "/agents", token))[0] == 200
        assert checked == [token]
        for _ in range(2):
            assert (await request(client, "/agents", token + "x"))[0] == 401
        assert len(checked) == 3


async def test_with_keys_not_required_every_request_passes(make_runtime) -> None:
    store = (await make_runtime(agents=[], workers=False)).store
    async with TestClient(TestServer(small_app(store, enabled=False))) as client:
        assert (await request(client, "/agents"))[:2] == (200, {"key": None})
        assert (await request(client, "/agents", header="Bearer nonsense"))[0] == 200


# -- the commands ----------------------------------------------------------------------------------


def test_keys_create_list_revoke(toren_cli: TorenCli, database_url: str) -> None:
    env = {"DATABASE_URL": database_url}

    made = toren_cli("keys", "create", "ci", env=env)
    assert made.returncode == 0, made.stderr
    assert KEY.fullmatch(one_line(made.stdout))  # the key alone: KEY=$(toren keys create ci)
    assert "shown only this once" in made.stderr

    made_json = toren_cli("keys", "create", "deploy", "--json", env=env)
    deploy = json.loads(made_json.stdout)
    assert set(deploy) == {"id", "name", "prefix", "created_at", "last_used_at", "revoked_at",
                           "role", "scopes", "agents", "expires_at", "key"}
    assert KEY.fullmatch(deploy["key"]) and deploy["key"].startswith(deploy["prefix"] + "_")

    listed = toren_cli("keys", "list", "--json", env=env)
    keys = json.loads(listed.stdout)["keys"]
    assert [k["name"] for k in keys] == ["deploy", "ci"]
    assert all(set(k) == {"id", "name", "prefix", "created_at", "last_used_at", "revoked_at",
                          "role", "scopes", "agents", "expires_at"} for k in keys)
    # toren_<hex prefix>_<secret>; the secret itself may contain "_", so split twice from the left
    secrets = [one_line(made.stdout).split("_", 2)[2], deploy["key"].split("_", 2)[2]]
    assert all(len(secret) >= 40 for secret in secrets)
    assert not any(secret in listed.stdout for secret in secrets)
    table = toren_cli("keys", "list", env=env).stdout
    assert deploy["prefix"] in table and keys[1]["prefix"] in table and "last used" in table

    revoked = toren_cli("keys", "revoke", deploy["prefix"], "--json", env=env)
    assert revoked.returncode == 0, revoked.stderr
    first = json.loads(revoked.stdout)
    assert first["id"] == deploy["id"] and first["revoked_at"] is not None
    again = toren_cli("keys", "revoke", deploy["id"], env=env)  # twice is fine
    assert again.returncode == 0, again.stderr
    assert f"Revoked API key {deploy['prefix']} (deploy)" in again.stdout

    unknown = toren_cli("keys", "revoke", "toren_ffffffff", env=env)
    assert unknown.returncode == 1
    assert one_line(unknown.stderr) == ("Error: no API key has the id or prefix "
                                        "'toren_ffffffff'; see `toren keys list`")
    unknown_json = toren_cli("keys", "revoke", deploy["key"][:-1] + "!", "--json", env=env)
    assert unknown_json.returncode == 1
    assert json.loads(unknown_json.stdout)["error"]["code"] == "key_not_found"


def test_keys_create_if_none_makes_only_the_first_key(toren_cli: TorenCli,
                                                     database_url: str) -> None:
    """`toren keys create NAME --if-none`: the first boot of a container deployment makes one
    key; every later boot (or replica) finds it and makes none."""
    env = {"DATABASE_URL": database_url}
    first = toren_cli("keys", "create", "admin", "--if-none", "--json", env=env)
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    assert made["created"] is True and made["name"] == "admin" and KEY.fullmatch(made["key"])

    again = toren_cli("keys", "create", "admin", "--if-none", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"created": False, "active_keys": 1}
    human = toren_cli("keys", "create", "other", "--if-none", env=env)
    assert human.returncode == 0 and human.stdout == ""  # no key on stdout: none was made
    assert "An active API key exists already (admin); none created." in one_line(human.stderr)
    listed = json.loads(toren_cli("keys", "list", "--json", env=env).stdout)["keys"]
    assert [key["name"] for key in listed] == ["admin"]

    assert toren_cli("keys", "revoke", made["prefix"], env=env).returncode == 0
    after_revoke = json.loads(toren_cli("keys", "create", "admin2", "--if-none", "--json",
                                        env=env).stdout)
    assert after_revoke["created"] is True and after_revoke["name"] == "admin2"


def test_serve_refuses_to_start_on_a_public_host_without_keys(toren_cli: TorenCli,
                                                              database_url: str,
                                                              tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    result = toren_cli("serve", "--dir", str(crew), "--host", "0.0.0.0", "--port", "0", "--json",
                       env={"DATABASE_URL": database_url})

    assert result.returncode == 1
    assert json.loads(one_line(result.stdout)) == {"error": {
        "code": "no_api_keys", "message": NO_KEYS.format("0.0.0.0")}}  # and no ready line
    assert one_line(result.stderr) == "Error: " + NO_KEYS.format("0.0.0.0")


def test_serve_with_a_key_serves_the_api_without_workers(toren_cli: TorenCli,
                                                         start_toren: StartToren,
                                                         database_url: str,
                                                         tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    token = json.loads(toren_cli("keys", "create", "ci", "--json", env=env).stdout)["key"]
    crew = write_agent_dir(tmp_path, "crew")

    server = start_toren("serve", "--dir", str(crew), "--port", "0", "--json", env=env)
    ready = server.next_json()
    assert ready["event"] == "ready"
    assert ready["url"].startswith("http://127.0.0.1:")
    assert ready["workers"] is None
    assert [agent["name"] for agent in ready["agents"]] == ["crew"]

    # a load balancer (or anyone) gets the status; a key shows the infrastructure
    for headers in ({}, {"Authorization": "Bearer wrong"},
                    {"Authorization": f"Bearer {token[:-1]}x"}):
        anonymous = urllib.request.Request(ready["url"] + "/healthz", headers=headers)
        with urllib.request.urlopen(anonymous, timeout=10) as response:
            assert response.status == 200
            assert json.loads(response.read()) == {"status": "ok", "version_skew": False}
    trusted = urllib.request.Request(ready["url"] + "/healthz",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(trusted, timeout=10) as response:
        health = json.loads(response.read())
    assert health["database"]["reachable"] is True and health["version"]
    assert health["workers"] == [] and health["versions"] == []  # toren serve has none
    # with keys, a page elsewhere still cannot use a key it does not have; a browser's
    # cross-site request is refused before the key is even looked at
    refused = urllib.request.Request(ready["url"] + "/agents", headers={
        "Authorization": f"Bearer {token}", "Sec-Fetch-Site": "cross-site"})
    with pytest.raises(urllib.error.HTTPError) as cross_site:
        urllib.request.urlopen(refused, timeout=10)
    with cross_site.value:
        assert cross_site.value.code == 403
        assert json.loads(cross_site.value.read())["error"]["code"] == "cross_site_request"
    authorized = urllib.request.Request(ready["url"] + "/agents",
                                        headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(authorized, timeout=10) as response:
        assert [a["name"] for a in json.loads(response.read())["agents"]] == ["crew"]

    assert server.stop(signal.SIGTERM) == 0
    assert "Traceback" not in server.stderr


def test_serve_with_workers_works_runs_and_keeps_the_serve_key_policy(
        toren_cli: TorenCli, start_toren: StartToren, database_url: str, tmp_path: Path) -> None:
    """`toren serve --workers` is the single-container shape: API and workers in one process,
    keys still required even on loopback (unlike `toren dev`)."""
    env = {"DATABASE_URL": database_url}
    crew = write_agent_dir(tmp_path, "crew")
    refused = toren_cli("serve", "--workers", "--dir", str(crew), "--port", "0", "--json",
                        env=env)
    assert refused.returncode == 1
    assert json.loads(one_line(refused.stdout))["error"]["code"] == "no_api_keys"

    token = json.loads(toren_cli("keys", "create", "ci", "--json", env=env).stdout)["key"]
    server = start_toren("serve", "--workers", "--dir", str(crew), "--port", "0", "--json",
                         env=env)
    ready = server.next_json()
    assert ready["event"] == "ready" and ready["workers"]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            ready["url"] + path, headers=headers, method="POST" if body is not None else "GET",
            data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    with pytest.raises(urllib.error.HTTPError) as anonymous:  # no key, no API
        urllib.request.urlopen(ready["url"] + "/agents", timeout=10)
    with anonymous.value:
        assert anonymous.value.code == 401
    run_id = call("/runs", {"agent": "crew", "input": "postgres"})["id"]
    assert wait_until(lambda: call(f"/runs/{run_id}")["status"] == "completed", 60)
    assert server.stop(signal.SIGTERM) == 0
    assert "Traceback" not in server.stderr


def test_keys_with_roles_agents_and_expiry_and_what_the_cli_refuses(
        toren_cli: TorenCli, start_toren: StartToren, database_url: str,
        tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    viewer = json.loads(toren_cli("keys", "create", "dash", "--role", "viewer", "--agent",
                                  "crew", "--expires", "30d", "--json", env=env).stdout)
    assert (viewer["role"], viewer["agents"], viewer["expires_at"] is not None) == (
        "viewer", ["crew"], True)
    assert "runs:write" not in viewer["scopes"] and "runs:read" in viewer["scopes"]
    custom = json.loads(toren_cli("keys", "create", "bot", "--role", "custom", "--scope",
                                  "runs:write", "--scope", "runs:read", "--json",
                                  env=env).stdout)
    assert custom["scopes"] == ["runs:read", "runs:write"]
    # every option has its variable (a deployment's first-boot script sets them)
    from_env = json.loads(toren_cli("keys", "create", "robot", "--json", env=env | {
        "TOREN_KEY_ROLE": "custom", "TOREN_KEY_SCOPES": "fleet:read runs:read",
        "TOREN_KEY_AGENTS": "crew other", "TOREN_KEY_EXPIRES": "12h"}).stdout)
    assert (from_env["role"], from_env["scopes"], from_env["agents"]) == (
        "custom", ["fleet:read", "runs:read"], ["crew", "other"])
    assert from_env["expires_at"] is not None
    table = toren_cli("keys", "list", env=env).stdout
    assert "viewer" in table and "custom: runs:read runs:write" in table and "all" in table

    for args, message in (
            (("dash",), "an active API key is named 'dash' already"),
            (("DASH",), "an active API key is named 'DASH' already"),
            (("cli:alice",), "may not start with 'cli:'"),
            (("x", "--role", "root"), "unknown role 'root'"),
            (("x", "--role", "viewer", "--scope", "runs:write"), "--scope gives the scopes"),
            (("x", "--role", "custom"), "needs at least one --scope"),
            (("x", "--role", "custom", "--scope", "runs:\x1b[31m"), "unknown scope"),
            (("x", "--agent", "Bad Name"), "is not an agent name"),
            (("x", "--expires", "tomorrow"), "neither a lifetime"),
            (("x", "--expires", "2001-01-01"), "not in the future"),
            (("x", "--expires", "99999999w"), "ten years")):
        refused = toren_cli("keys", "create", *args, env=env)
        assert refused.returncode == 1, (args, refused.stdout)
        assert message in one_line(refused.stderr), (args, refused.stderr)
        assert "Traceback" not in refused.stderr

    write_agent_dir(tmp_path / "crews", "crew")
    server = start_toren("serve", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                         env=env)
    url = str(server.next_json()["url"])
    over_url = env | {"TOREN_URL": url, "TOREN_API_KEY": viewer["key"]}
    listed = toren_cli("jobs", "list", "--json", env=over_url)
    assert listed.returncode == 0, listed.stderr
    refused = toren_cli("run", "crew", "hello", env=over_url)
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert "needs the scope runs:write" in line and "role viewer" in line, line
    assert server.stop(signal.SIGTERM) == 0
