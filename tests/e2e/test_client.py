"""toren.client against a real `toren dev` process: async and sync, SSE, errors."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import wait_until
from tests.e2e.test_http_api import TOOLS, conforms
from toren.client import SyncTorenClient, TorenAPIError, TorenClient
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def url(database_url: str, start_toren, tmp_path: Path) -> str:
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.1"})
    return str(dev.next_json()["url"])


async def test_async_client_runs_streams_and_cancels(url: str) -> None:
    async with aiohttp.ClientSession() as session, TorenClient(url, session=session) as client:
        health = await client.healthz()
        conforms("Health", health)
        assert [a["name"] for a in await client.agents()] == ["crew"]
        created = await client.create_run("crew", "postgres", idempotency_key="k-1")
        again = await client.create_run("crew", "postgres", idempotency_key="k-1")
        assert created["id"] == again["id"]
        streamed = [event async for event in client.stream_events(created["id"])]
        for event in streamed:
            conforms("Event", event)
        assert streamed[0]["type"] == "RunCreated" and streamed[-1]["stream"] == "run"
        run = await client.wait_for_run(created["id"], timeout_s=30)
        conforms("RunDetail", run)
        assert run["status"] == "completed" and "facts about postgres" in run["output"]
        listed = await client.list_runs(agent="crew")
        assert [r["id"] for r in listed["runs"]] == [created["id"]]
        assert listed["runs"][0]["totals"]["model_calls"] == 2
        found = await client.list_runs(q="postgres", sort="-cost", since="2000-01-01")
        assert [r["id"] for r in found["runs"]] == [created["id"]]
        assert (await client.list_runs(q="nothing-like-it"))["runs"] == []
        events = await client.events(created["id"])
        assert len(events["events"]) == len(streamed)
        with pytest.raises(TorenAPIError) as missing:
            await client.get_run("00000000-0000-0000-0000-000000000000")
        assert (missing.value.status, missing.value.code) == (404, "run_not_found")
        with pytest.raises(TorenAPIError) as unknown:
            await client.create_run("ghost", "x")
        assert unknown.value.code == "agent_not_found" and not unknown.value.retryable


def test_sync_client_mirrors_the_async_one(url: str) -> None:
    client = SyncTorenClient(url)
    created = client.create_run("crew", "sync")
    cancelled = client.cancel_run(created["id"], "not needed")
    assert cancelled["status"] == "cancelled"
    assert client.get_run(created["id"])["stop_reason"] == "cancelled"
    assert client.healthz()["status"] == "ok"


async def test_client_sessions_take_turns(url: str) -> None:
    async with TorenClient(url) as client:
        created = await client.create_session("crew", idempotency_key="conv-9")
        assert created["status"] == "awaiting_input"
        assert (await client.create_session("crew", idempotency_key="conv-9"))["id"] == (
            created["id"])
        accepted = await client.send_message(created["id"], "postgres", idempotency_key="m-1")
        conforms("TurnAccepted", accepted)
        assert accepted["turn"] == 1
        # a retry after a lost answer: the same turn, nothing sent twice
        resent = await client.send_message(created["id"], "postgres", idempotency_key="m-1")
        assert resent["turn"] == 1
        with pytest.raises(TorenAPIError) as busy:
            await client.send_message(created["id"], "too soon")
        assert (busy.value.status, busy.value.code) == (409, "session_busy")
        session = await client.wait_for_turn(created["id"], poll_s=0.1, timeout_s=60)
        conforms("Session", session)
        assert session["status"] == "awaiting_input"
        assert "facts about postgres" in session["transcript"][-1]["text"]
        # a turn's events, live, until it ends
        seen = []
        await client.send_message(created["id"], "sqlite")
        async for event in client.stream_events(created["id"]):
            seen.append(event["type"])
            if event["type"] == "TurnEnded" and event["data"]["turn"] == 2:
                break
        assert seen.count("TurnEnded") == 2 and seen.count("UserMessage") == 2
        listed = await client.list_runs(kind="session")
        assert [run["id"] for run in listed["runs"]] == [created["id"]]
        await client.close_session(created["id"])
        closed = await client.wait_for_turn(created["id"], poll_s=0.1, timeout_s=60)
        assert closed["status"] == "completed"
        with pytest.raises(TorenAPIError) as ended:
            await client.send_message(created["id"], "hello?")
        assert (ended.value.status, ended.value.code) == (409, "session_ended")


def test_sync_client_streams_a_run_like_the_async_one(url: str) -> None:
    """``stream_events`` and ``stream_live`` of the sync client are iterators of the same
    items: each event once, in order, until the run ends."""
    client = SyncTorenClient(url)
    run_id = client.create_run("crew", "postgres")["id"]
    streamed = list(client.stream_events(run_id))
    for event in streamed:
        conforms("Event", event)
    assert streamed[0]["type"] == "RunCreated" and streamed[-1]["stream"] == "run"
    logged = client.events(run_id)
    assert logged["status"] == "completed"
    assert [(e["stream"], e["seq"]) for e in streamed] == [
        (e["stream"], e["seq"]) for e in logged["events"]]
    # from a cursor, the rest only; stream_live adds text pieces (none for a finished run)
    later = [event for event in client.stream_live(run_id, after=streamed[2]["cursor"])
             if "cursor" in event]
    assert [e["seq"] for e in later] == [e["seq"] for e in streamed[3:]]


def test_leaving_a_sync_stream_closes_its_connection() -> None:
    """``break`` out of a sync stream that is still open: the connection is closed at once (a
    server that writes to it sees it gone), and the client works on."""
    seen: list[str] = []

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        seen.append("opened")
        await response.write(b'id: c1\ndata: {"run_id": "r", "seq": 1, "cursor": "c1"}\n\n')
        try:
            for _ in range(600):  # a run that goes on for a minute
                await asyncio.sleep(0.1)
                await response.write(b": still running\n\n")
        except (ConnectionError, asyncio.CancelledError):
            seen.append("closed")
            raise
        seen.append("ran to the end")
        return response

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version_skew": False})

    app = web.Application()
    app.router.add_get("/runs/{run_id}/events", events)
    app.router.add_get("/healthz", health)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        client = SyncTorenClient(f"http://127.0.0.1:{runner.addresses[0][1]}")
        for event in client.stream_events("3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"):
            assert event["seq"] == 1  # the first event, while the server is still sending
            break
        assert wait_until(lambda: "closed" in seen, 30), seen
        assert seen == ["opened", "closed"]
        assert client.healthz()["status"] == "ok"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_sync_client_sessions(url: str) -> None:
    client = SyncTorenClient(url)
    session_id = client.create_session("crew")["id"]
    assert client.send_message(session_id, "postgres")["turn"] == 1
    assert client.wait_for_turn(session_id, poll_s=0.1, timeout_s=60)["turns_ended"] == 1
    assert client.close_session(session_id)["closing"] is True
    assert client.wait_for_turn(session_id, poll_s=0.1, timeout_s=60)["status"] == "completed"
    assert client.get_session(session_id)["stop_reason"] == "end_turn"


async def test_a_stream_outlives_its_server_being_killed(database_url: str, start_toren,
                                                         tmp_path: Path) -> None:
    import signal
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.5", "TOREN_LEASE_TTL": "2"}

    def serve():
        dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", port, "--json",
                          env=env)
        return dev, str(dev.next_json()["url"])

    first, url = serve()
    async with TorenClient(url) as client:
        run_id = (await client.create_run("crew", "postgres"))["id"]
        seen = []
        async for event in client.stream_events(run_id, reconnects=8):
            seen.append((event["stream"], event["seq"]))
            if len(seen) == 4:  # mid-run: the server (and its workers) die
                first.stop(signal.SIGKILL)
                serve()  # a new one on the same address; the client reconnects to it
        logged = await client.events(run_id)
    assert seen == [(e["stream"], e["seq"]) for e in logged["events"]]  # each once, in order
    assert logged["status"] == "completed"
