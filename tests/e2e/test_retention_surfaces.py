"""Retention as users reach it: ``toren db archive`` and ``toren jobs list --archived`` / ``show``
in real subprocesses, and the HTTP API (an in-process server on a real socket): archived runs
listed and read through the run routes, ``POST /archive``, and hostile inputs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import call, conforms, finished, start_server
from toren.client import TorenClient
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

pytestmark = pytest.mark.timeout(240)

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


def age_all_runs(database_url: str, schema: str = "agent_crew") -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {schema}.runs SET finished_at = now() - interval '40 days'")


def test_db_archive_then_jobs_list_archived_and_show(toren_cli: TorenCli, database_url: str,
                                                     tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    env = {"DATABASE_URL": database_url, "TOREN_ARCHIVE": (tmp_path / "archive").as_uri()}
    done = toren_cli("run", "crew", "postgres", "--dir", str(crew), "--json", env=env)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["id"]
    age_all_runs(database_url)
    shown_hot = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)

    dry = toren_cli("db", "archive", "--dir", str(crew), "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    assert [run["id"] for run in json.loads(dry.stdout)["runs"]] == [run_id]

    done = toren_cli("db", "archive", "--dir", str(crew), "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["agents"]["crew"]["archived"] == 1
    assert report["hot_tables"]["crew"]["archived_runs_bytes"] > 0

    listed = toren_cli("jobs", "list", "--json", env=env)
    assert json.loads(listed.stdout)["runs"] == []  # no longer hot
    archived = json.loads(toren_cli("jobs", "list", "--archived", "--json", env=env).stdout)
    assert [run["id"] for run in archived["runs"]] == [run_id]
    assert archived["runs"][0]["archive"]["summary"]["model_calls"] >= 1
    table = toren_cli("jobs", "list", "--archived", env=env)
    assert run_id[:8] in table.stdout and "completed" in table.stdout

    # show finds it by its whole id and by a prefix, and reads it as it read it hot
    for ref in (run_id, run_id[:8]):
        shown = toren_cli("jobs", "show", ref, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout) == shown_hot
    text = toren_cli("jobs", "show", run_id, env=env)
    assert "Here is what I found for 'postgres'" in text.stdout
    # reading needs no TOREN_ARCHIVE: the index names each object's location
    unset = toren_cli("jobs", "show", run_id, "--json", env=env | {"TOREN_ARCHIVE": None})
    assert unset.returncode == 0, unset.stderr
    assert json.loads(unset.stdout) == shown_hot

    restored = toren_cli("db", "restore", run_id[:8], "--json", env=env)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["id"] == run_id
    assert [r["id"] for r in json.loads(toren_cli("jobs", "list", "--json",
                                                   env=env).stdout)["runs"]] == [run_id]
    gone = toren_cli("db", "restore", run_id, env=env)
    assert gone.returncode == 1 and "no archived run" in gone.stderr

    missing = toren_cli("db", "archive", "--dir", str(crew), env=env | {"TOREN_ARCHIVE": None})
    assert missing.returncode == 1 and "TOREN_ARCHIVE" in missing.stderr
    bad = toren_cli("db", "archive", "--dir", str(crew),
                    env=env | {"TOREN_ARCHIVE": "ftp://host/x"})
    assert bad.returncode == 1 and "no archive driver named 'ftp'" in bad.stderr
    bad_age = toren_cli("db", "archive", "--dir", str(crew), env=env | {"TOREN_RETENTION": "3y"})
    assert bad_age.returncode == 1 and "TOREN_RETENTION" in bad_age.stderr


@pytest.fixture
async def served(make_runtime: Any, tmp_path: Path, database_url: str
                 ) -> AsyncIterator[tuple[str, Runtime, str]]:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    runtime = await make_runtime(dirs=[crew], archive_url=(tmp_path / "archive").as_uri())
    run_id = await runtime.start_run("crew", "postgres")
    await runtime.wait_for_run(run_id, timeout_s=60)
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    yield url, runtime, run_id
    await runner.cleanup()


async def test_http_archive_pass_and_archived_run_reads(served: tuple[str, Runtime, str],
                                                        database_url: str) -> None:
    url, _runtime, run_id = served
    age_all_runs(database_url)
    async with TorenClient(url) as client:
        hot = (await client.get_run(run_id), await client.receipt(run_id),
               await client.events(run_id))
        dry = await client.archive(dry_run=True)
        assert [run["id"] for run in dry["runs"]] == [run_id]
        report = await client.archive(max_runs=5)
        assert report["agents"]["crew"]["archived"] == 1
        page = await client.list_archived_runs(agent="crew", limit=1)
        assert [run["id"] for run in page["runs"]] == [run_id] and page["next_cursor"] is None
        assert (await client.list_runs())["runs"] == []
        assert await client.get_run(run_id) == hot[0]
        assert await client.receipt(run_id) == hot[1]
        assert await client.events(run_id) == hot[2]
        streamed = [event async for event in client.stream_events(run_id)]
        assert [e["seq"] for e in streamed] == [e["seq"] for e in hot[2]["events"]]


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("POST", "/archive", b'{"dry_run": "yes"}', 400, "invalid_body"),
    ("POST", "/archive", b'{"max_runs": 0}', 400, "invalid_body"),
    ("POST", "/archive", b'{"max_runs": true}', 400, "invalid_body"),
    ("POST", "/archive", b'{"max_runs": 1e99}', 400, "invalid_body"),
    ("POST", "/archive", b'{"everything": 1}', 400, "invalid_body"),
    ("POST", "/archive", b"[1, 2]", 400, "invalid_body"),
    ("POST", "/archive", b"{not json", 400, "invalid_json"),
    ("POST", "/archive", b'{"dry_run": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400,
     "invalid_json"),
    ("GET", "/archived-runs?limit=0", None, 400, "invalid_limit"),
    ("GET", "/archived-runs?limit=abc", None, 400, "invalid_limit"),
    ("GET", "/archived-runs?limit=201", None, 400, "invalid_limit"),
    ("GET", "/archived-runs?agent=nobody", None, 404, "agent_not_found"),
    ("GET", "/archived-runs?cursor=%00%ff", None, 400, "invalid_cursor"),
])
async def test_hostile_retention_requests_get_json_errors(
        served: tuple[str, Runtime, str], method: str, path: str, body: bytes | None,
        status: int, code: str) -> None:
    url = served[0]
    headers = {"Content-Type": "application/json"} if body is not None else {}
    async with aiohttp.ClientSession() as http, http.request(
            method, url + path, data=body, headers=headers) as answer:
        assert answer.status == status, await answer.text()
        assert (await answer.json())["error"]["code"] == code


async def test_archive_without_an_archive_is_409_and_needs_json(
        make_runtime: Any, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    runtime = await make_runtime(dirs=[crew], workers=False)
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/archive", json={}) as answer:
                assert answer.status == 409
                assert (await answer.json())["error"]["code"] == "archive_not_configured"
            async with http.post(f"{url}/archive", data="dry_run=1",
                                 headers={"Content-Type": "text/plain"}) as answer:
                assert answer.status == 415
    finally:
        await runner.cleanup()


async def test_archive_routes_need_a_key_when_keys_are_on(make_runtime: Any,
                                                          tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS)
    runtime = await make_runtime(dirs=[crew], workers=False)
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    try:
        async with aiohttp.ClientSession() as http:
            for method, path in (("POST", "/archive"), ("GET", "/archived-runs")):
                async with http.request(method, f"{url}{path}",
                                        json={}) as answer:
                    assert answer.status == 401
    finally:
        await runner.cleanup()


def test_archive_and_restore_against_a_deployment(database_url: str, start_toren: Any,
                                                  toren_cli: TorenCli, tmp_path: Path) -> None:
    """``toren db archive --url`` and ``toren db restore --url`` work on a deployment's API
    (``POST /archive``, ``POST /runs/{id}/restore``), as they do on the database."""
    url = start_server(start_toren, database_url, tmp_path, TOREN_RETENTION="30d",
                       TOREN_ARCHIVE=(tmp_path / "archive").as_uri())["url"]
    status, created, _ = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"})
    assert status == 201
    run_id = created["id"]
    assert wait_until(lambda: finished(url, run_id), 60)
    status, answer, _ = call(f"{url}/runs/{run_id}/restore", "POST", {})
    assert (status, answer["error"]["code"]) == (409, "run_not_archived")
    age_all_runs(database_url)
    hot = call(f"{url}/runs/{run_id}")[1]

    archived = toren_cli("db", "archive", "--url", url, "--json")
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["agents"]["crew"]["archived"] == 1
    table = toren_cli("db", "archive", "--url", url, env={"TOREN_URL": None})
    assert table.returncode == 0 and "crew" in table.stdout  # a pass with nothing left to do
    listed = toren_cli("jobs", "list", "--archived", "--json", env={"TOREN_URL": url})
    assert [run["id"] for run in json.loads(listed.stdout)["runs"]] == [run_id]

    # hostile restores: typed 4xx errors, and the run stays archived
    for body, raw, expected, code in (({"everything": 1}, None, 400, "invalid_body"),
                                      (None, b"{not json", 400, "invalid_json"),
                                      (None, b"[1]", 400, "invalid_body")):
        status, answer, _ = call(f"{url}/runs/{run_id}/restore", "POST", body, raw=raw)
        assert (status, answer["error"]["code"]) == (expected, code), (body, raw)
    status, answer, _ = call(f"{url}/runs/{run_id}/restore", "POST", raw=b"x",
                             headers={"Content-Type": "text/plain"})
    assert status == 415
    for bad in ("not-a-uuid", "0b5c3c9e-0000-4000-8000-000000000000", "%00"):
        status, answer, _ = call(f"{url}/runs/{bad}/restore", "POST", {})
        assert (status, answer["error"]["code"]) == (404, "run_not_found"), bad
    assert [run["id"] for run in call(f"{url}/archived-runs")[1]["runs"]] == [run_id]

    restored = toren_cli("db", "restore", run_id[:8], "--url", url, "--json")
    assert restored.returncode == 0, restored.stderr
    conforms("Run", json.loads(restored.stdout))
    assert json.loads(restored.stdout)["id"] == run_id
    assert call(f"{url}/runs/{run_id}")[1] == hot  # hot again, read as before
    assert call(f"{url}/archived-runs")[1]["runs"] == []
    again = toren_cli("db", "restore", run_id, "--url", url, "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout)["error"]["code"] == "run_not_archived"
    unknown = toren_cli("db", "restore", "abcdef", "--url", url)
    assert unknown.returncode == 1 and "no archived run's id starts with 'abcdef'" in \
        unknown.stderr
