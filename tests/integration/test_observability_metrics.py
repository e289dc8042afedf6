"""``/metrics`` on the API server and on a worker's listener, scraped during and after real runs
and parsed with Prometheus's own parser; its auth; ``GET /fleet``."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

import toren
from toren.config import Settings
from toren.errors import ConfigError
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]
TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    return a + b
'''
SECRET_INPUT = "the launch code is 0000-TOP-SECRET"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(runtime: Runtime, *, require_keys: bool = False) -> str:
        runner, url = await serve_on_free_port(create_app(runtime, require_keys=require_keys))
        runners.append(runner)
        return url

    yield start
    for runner in runners:
        await runner.cleanup()


async def scrape(url: str, headers: dict[str, str] | None = None
                 ) -> tuple[int, str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """(status, content type, {(sample name, sorted labels): value})."""
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as answer:
        text = await answer.text()
        if answer.status != 200:
            return answer.status, answer.content_type, {}
        samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                   for family in text_string_to_metric_families(text)
                   for sample in family.samples}
        assert SECRET_INPUT not in text
        return answer.status, answer.headers["Content-Type"], samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_move_during_a_run_on_the_server_and_the_worker_listener(
        toren_runtime: MakeRuntime, serve, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SCRIPTED_DELAY", "0.4")
    monkeypatch.setenv("TOREN_SCRIPTED_COST_USD", "0.01")
    port = free_port()
    runtime = await toren_runtime([write_agent_dir(tmp_path, "calc", tools_py=TOOLS,
                                                   model="toren/scripted")],
                                  metrics_port=port)
    server = await serve(runtime)
    status, content_type, before = await scrape(f"{server}/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    assert value(before, "toren_process_info", version=toren.__version__) == 1
    assert value(before, "toren_workers", version=toren.__version__) == 1
    assert value(before, "toren_agent_workers", agent="calc", lane="short") == 1
    assert value(before, "toren_runs", agent="calc", status="running") == 0

    run_id = await runtime.start_run("calc", SECRET_INPUT)
    for _ in range(100):  # scrape while the run is in flight (the cache lives 5 s)
        await asyncio.sleep(0.1)
        _, _, during = await scrape(f"http://127.0.0.1:{port}/metrics")
        if value(during, "toren_model_calls_total", agent="calc", model="toren/scripted"):
            break
    assert (await runtime.get_run(run_id)).status == "running"
    assert value(during, "toren_model_calls_total", agent="calc", model="toren/scripted") >= 1
    assert value(during, "toren_runs_finished_total", agent="calc", status="completed") == 0

    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    runtime.metrics._read_at = float("-inf")  # the next scrape reads the database again
    _, _, after = await scrape(f"{server}/metrics")
    calls = [e for e in await runtime.events(run_id) if e.type == "ModelCallCompleted"]
    model = {"agent": "calc", "model": "toren/scripted"}
    assert value(after, "toren_model_calls_total", **model) == len(calls) >= 2
    assert value(after, "toren_model_tokens_total", **model, kind="input") == sum(
        e.data["usage"]["input_tokens"] for e in calls) > 0
    assert value(after, "toren_model_tokens_total", **model, kind="output") == sum(
        e.data["usage"]["output_tokens"] for e in calls) > 0
    assert value(after, "toren_model_cost_usd_total", **model) == pytest.approx(
        0.01 * len(calls))
    assert value(after, "toren_model_call_seconds_count", **model) == len(calls)
    assert value(after, "toren_tool_calls_total", agent="calc", tool="add", outcome="ok") == 1
    assert value(after, "toren_runs_finished_total", agent="calc", status="completed") == 1
    assert value(after, "toren_append_seconds_count") > value(before, "toren_append_seconds_count")
    assert value(after, "toren_messages_handled_total", agent="calc", kind="task") >= 1
    assert value(after, "toren_queue_wait_seconds_count", agent="calc") >= 1
    assert value(after, "toren_queue_messages", agent="calc", state="ready") == 0
    assert value(after, "toren_runs", agent="calc", status="running") == 0
    assert ("toren_queue_oldest_ready_age_seconds", (("agent", "calc"),)) in after
    assert value(after, "toren_dead_letters", agent="calc") == 0
    assert value(after, "toren_lease_takeovers_total", agent="calc") == 0


async def test_queue_gauges_count_waiting_messages_and_their_age(
        database_url: str, tmp_path: Path) -> None:
    # a runtime without workers: what is queued stays queued
    settings = Settings(database_url=database_url, home=tmp_path / "home", load_plugins=())
    api = Runtime([write_agent_dir(tmp_path, "idle")], settings=settings)
    await api.start(workers=False)
    try:
        for text in ("one", "two", "three"):
            await api.start_run("idle", text)
        await asyncio.sleep(0.3)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(
                       (await api.metrics.exposition()).decode())
                   for s in family.samples}
        assert value(samples, "toren_queue_messages", agent="idle", state="ready") == 3
        assert value(samples, "toren_queue_oldest_ready_age_seconds", agent="idle") >= 0.3
        assert value(samples, "toren_runs", agent="idle", status="queued") == 3
        fleet = await asyncio.wait_for(_fleet(api), 10)
        assert fleet["agents"]["idle"]["queue"]["ready"] == 3
        assert fleet["agents"]["idle"]["runs"] == {"queued": 3}
        assert len(fleet["runs_in_flight"]) == 3
        assert {run["step"] for run in fleet["runs_in_flight"]} == {0}
    finally:
        await api.stop()


async def _fleet(runtime: Runtime) -> dict[str, Any]:
    from toren.host.fleet import fleet_snapshot

    return await fleet_snapshot(runtime.store, 10.0)


async def test_metrics_and_fleet_need_a_key_unless_metrics_are_made_public(
        toren_runtime: MakeRuntime, serve, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "guarded")
    runtime = await toren_runtime([directory])
    server = await serve(runtime, require_keys=True)
    _key, token = await runtime.store.create_key("scraper")
    assert (await scrape(f"{server}/metrics"))[0] == 401
    assert (await scrape(f"{server}/metrics", {"Authorization": "Bearer nope"}))[0] == 401
    assert (await scrape(f"{server}/metrics", {"Authorization": f"Basic {token}"}))[0] == 401
    status, _, samples = await scrape(f"{server}/metrics", {"Authorization": f"Bearer {token}"})
    assert status == 200 and value(samples, "toren_process_info", version=toren.__version__)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{server}/fleet") as answer:
            assert answer.status == 401
            assert (await answer.json())["error"]["code"] == "unauthorized"
        async with http.get(f"{server}/fleet",
                            headers={"Authorization": f"Bearer {token}"}) as answer:
            assert answer.status == 200
            fleet = await answer.json()
            assert "guarded" in fleet["agents"]
            assert [w["version"] for w in fleet["workers"]] == [toren.__version__]
        async with http.post(f"{server}/metrics", data=b"x" * 10_000,
                             headers={"Authorization": f"Bearer {token}"}) as answer:
            assert answer.status == 405
        async with http.get(f"{server}/metrics?name[]=%00&x=" + "y" * 4000,
                            headers={"Authorization": f"Bearer {token}"}) as answer:
            assert answer.status == 200  # parameters are ignored

    public = await toren_runtime([directory], metrics_public=True)
    public_server = await serve(public, require_keys=True)
    assert (await scrape(f"{public_server}/metrics"))[0] == 200
    async with aiohttp.ClientSession() as http, http.get(f"{public_server}/fleet") as answer:
        assert answer.status == 401  # only /metrics is made public


async def test_the_worker_listener_is_off_by_default_and_bad_ports_are_refused() -> None:
    assert Settings.from_env({}).metrics_port is None
    assert Settings.from_env({"TOREN_METRICS_PORT": "9464"}).metrics_port == 9464
    for bad in ("0", "-1", "70000", "http", "9464.5"):
        with pytest.raises(ConfigError, match="TOREN_METRICS_PORT"):
            Settings.from_env({"TOREN_METRICS_PORT": bad})
    with pytest.raises(ConfigError, match="TOREN_METRICS_PUBLIC"):
        Settings.from_env({"TOREN_METRICS_PUBLIC": "maybe"})
