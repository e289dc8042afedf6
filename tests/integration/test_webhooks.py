"""Completion webhooks end to end: a real aiohttp receiver on 127.0.0.1, real Postgres, the
in-process runtime sending (docs/guides/webhooks.md).

Receivers on loopback need ``webhook_allow_private``; the tests of the refusal run without it.
Backoff is milliseconds here (``webhook_retry_base_s``), so retries take no wall time.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from aiohttp import web

from toren.core.webhooks import WebhookSubscription
from toren.errors import InvalidWebhook
from toren.host.runtime import Runtime
from toren.host.webhooks import CheckedResolver, WebhookRefused
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir
from toren.webhooks import SIGNATURE_HEADER, verify

SECRET = "test-signing-secret"
#: Settings of a runtime that may send to the test's loopback receiver, retrying at once.
LOOPBACK = {"webhook_allow_private": True, "webhook_secret": SECRET,
            "webhook_retry_base_s": 0.01, "webhook_retry_max_delay_s": 0.02,
            "webhook_timeout_s": 5.0}


class Receiver:
    """What the receiver saw, and what it answers: ``statuses`` in turn, then 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        self.redirected = 0
        self.url = ""

    async def hook(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status, text="nope" if status >= 400 else "ok")

    async def moved(self, request: web.Request) -> web.Response:
        self.redirected += 1
        raise web.HTTPFound(location="/hook")

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _headers, body in self.requests]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    seen = Receiver()
    app = web.Application()
    app.router.add_post("/hook", seen.hook)
    app.router.add_post("/moved", seen.moved)
    runner, url = await serve_on_free_port(app)
    seen.url = url
    yield seen
    await runner.cleanup()


async def eventually(check: Callable[[], Awaitable[bool]], what: str,
                     timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)


async def settled(runtime: Runtime, run_id: str, count: int = 1) -> list[dict[str, Any]]:
    """The run's deliveries once ``count`` of them are delivered or failed."""
    found: list[dict[str, Any]] = []

    async def done() -> bool:
        nonlocal found
        found = [d.to_json() for d in await runtime.webhook_deliveries(run_id)]
        return sum(d["state"] != "pending" for d in found) >= count

    await eventually(done, f"{count} webhook deliveries of run {run_id} settled")
    return found


async def test_a_receiver_that_fails_twice_gets_one_delivery_with_one_event_id(
        make_runtime: Callable[..., Awaitable[Runtime]], receiver: Receiver,
        tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], **LOOPBACK)
    receiver.statuses = [500, 500]

    run_id = await runtime.start_run("a", "hello", webhooks=[
        WebhookSubscription(f"{receiver.url}/hook")])
    record = await runtime.wait_for_run(run_id, timeout_s=20)
    [delivery] = await settled(runtime, run_id)

    assert record.status == "completed"
    assert delivery["state"] == "delivered" and delivery["attempts"] == 3
    assert [a["status_code"] for a in delivery["history"]] == [500, 500, 200]
    assert delivery["history"][0]["error"] == "HTTP 500: nope"
    # the receiver saw the same event three times: same id, same bytes, each signed
    assert len(receiver.requests) == 3
    assert {headers["Toren-Event-Id"] for headers, _ in receiver.requests} == {delivery["id"]}
    assert len({body for _, body in receiver.requests}) == 1
    for headers, body in receiver.requests:
        verify(SECRET, body, headers[SIGNATURE_HEADER])
    body = receiver.bodies()[0]
    assert body["id"] == delivery["id"] and body["type"] == "run.finished"
    assert body["run_id"] == run_id and body["agent"] == "a"
    assert body["status"] == "completed" and body["stop_reason"] == record.stop_reason
    assert body["output"] == record.output
    assert body["totals"]["model_calls"] >= 1 and body["totals"]["duration_s"] >= 0


async def test_a_run_that_ends_while_no_host_sends_is_told_about_later(
        make_runtime: Callable[..., Awaitable[Runtime]], receiver: Receiver,
        tmp_path: Path) -> None:
    agent = write_agent_dir(tmp_path, "a")
    first = await make_runtime(dirs=[agent], **LOOPBACK)
    assert first.webhooks is not None
    await first.webhooks.stop()  # this host sends nothing: the delivery waits in the outbox
    first.webhooks = None
    run_id = await first.start_run("a", "hello", webhooks=[
        WebhookSubscription(f"{receiver.url}/hook")])
    await first.wait_for_run(run_id, timeout_s=20)
    [pending] = await first.webhook_deliveries(run_id)
    assert pending.state == "pending" and pending.attempts == 0
    await first.stop()
    assert receiver.requests == []

    second = await make_runtime(dirs=[agent], **LOOPBACK)
    [delivery] = await settled(second, run_id)

    assert delivery["state"] == "delivered" and delivery["id"] == pending.id
    assert [body["id"] for body in receiver.bodies()] == [pending.id]


def delivery_rows(database_url: str, run_id: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT event, run_status, source FROM "
                            "toren_control.webhook_deliveries WHERE run_id = %s "
                            "ORDER BY occurred_at, n", [run_id]).fetchall()


async def test_every_write_that_ends_a_run_writes_its_delivery_in_its_transaction(
        make_runtime: Callable[..., Awaitable[Runtime]], database_url: str,
        tmp_path: Path) -> None:
    # notify: of the agent and a webhook of the run; no workers: nothing runs or sends
    agent = write_agent_dir(tmp_path, "a", notify=[
        {"url": "https://hooks.example.com/toren", "events": ["finished"]}])
    runtime = await make_runtime(dirs=[agent], workers=False, **LOOPBACK)
    cancelled = await runtime.start_run("a", "x", webhooks=[
        WebhookSubscription("https://example.com/run-hook", ("finished", "awaiting_input"))])
    await runtime.cancel_run(cancelled)
    assert delivery_rows(database_url, cancelled) == [
        ("finished", "cancelled", "run"), ("finished", "cancelled", "agent")]
    await runtime.cancel_run(cancelled)  # ended once: told once
    assert len(delivery_rows(database_url, cancelled)) == 2

    # any other write that sets a status: a status change nobody asked for writes nothing,
    # a rolled-back one writes nothing, a committed one its delivery
    other = await runtime.start_run("a", "y")
    with psycopg.connect(database_url) as conn:
        conn.execute('UPDATE agent_a.runs SET status = %s WHERE id = %s', ["running", other])
        conn.commit()
        conn.execute('UPDATE agent_a.runs SET status = %s WHERE id = %s', ["failed", other])
        conn.rollback()
    assert delivery_rows(database_url, other) == []
    with psycopg.connect(database_url) as conn:
        conn.execute('UPDATE agent_a.runs SET status = %s WHERE id = %s', ["failed", other])
    assert delivery_rows(database_url, other) == [("finished", "failed", "agent")]


async def test_a_session_tells_each_awaiting_input_when_asked(
        make_runtime: Callable[..., Awaitable[Runtime]], receiver: Receiver,
        tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], **LOOPBACK)
    session = await runtime.start_session("a", webhooks=[WebhookSubscription(
        f"{receiver.url}/hook", ("awaiting_input", "finished"))])

    await runtime.send_message(session, "hi")
    await runtime.wait_for_turn(session, timeout_s=20)
    await settled(runtime, session)
    await runtime.close_session(session)
    deliveries = await settled(runtime, session, 2)

    assert [(d["event"], d["state"]) for d in deliveries] == [
        ("awaiting_input", "delivered"), ("finished", "delivered")]
    assert [b["type"] for b in receiver.bodies()] == ["run.awaiting_input", "run.finished"]


async def test_redirects_are_not_followed_and_retries_give_up(
        make_runtime: Callable[..., Awaitable[Runtime]], receiver: Receiver,
        tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")],
                                 **(LOOPBACK | {"webhook_retry_for_s": 0.3}))
    run_id = await runtime.start_run("a", "hello", webhooks=[
        WebhookSubscription(f"{receiver.url}/moved")])
    [delivery] = await settled(runtime, run_id)

    assert delivery["state"] == "failed" and delivery["attempts"] >= 2
    assert {a["status_code"] for a in delivery["history"]} == {302}
    assert "redirects are not followed" in delivery["history"][0]["error"]
    assert "gave up after" in delivery["last_error"]
    assert receiver.redirected == delivery["attempts"] and receiver.requests == []


async def test_private_destinations_are_refused_without_the_setting(
        make_runtime: Callable[..., Awaitable[Runtime]], receiver: Receiver,
        tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")],
                                 **(LOOPBACK | {"webhook_allow_private": False}))
    # a literal loopback address or localhost: refused when the run is started
    for url in (f"{receiver.url}/hook", "http://localhost:9/x", "http://[::1]/x",
                "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/x",
                "http://[::ffff:127.0.0.1]/x"):
        with pytest.raises(InvalidWebhook, match="refused"):
            await runtime.start_run("a", "x", webhooks=[WebhookSubscription(url)])
    # at send time every address a name resolves to is checked
    with pytest.raises(WebhookRefused, match="TOREN_WEBHOOK_ALLOW_PRIVATE"):
        await CheckedResolver(allow_private=False).resolve("localhost", 80)
    assert await CheckedResolver(allow_private=True).resolve("localhost", 80)
    # a name that resolves to this machine's own (private or loopback) address: refused when
    # sent, without a connection (the receiver sees nothing) and without retrying
    try:
        await asyncio.get_running_loop().getaddrinfo(socket.gethostname(), None)
    except OSError:
        return  # a host whose name does not resolve: the resolver's check above stands alone
    port = receiver.url.rsplit(":", 1)[1]
    run_id = await runtime.start_run("a", "x", webhooks=[
        WebhookSubscription(f"http://{socket.gethostname()}:{port}/hook")])
    [delivery] = await settled(runtime, run_id)

    assert delivery["state"] == "failed" and delivery["attempts"] == 1
    assert "TOREN_WEBHOOK_ALLOW_PRIVATE" in delivery["last_error"]
    assert receiver.requests == []


HOSTILE = [
    "", "ftp://example.com/x", "javascript:alert(1)", "http://", "/relative/path",
    "http://user:pass@example.com/x", "http://example.com/x#frag", "http://exa mple.com/",
    "http://example.com:99999/", "http://example.com/\x7f", "https://example.com/" + "a" * 2100,
    "http://exämple.com/", 42, None, ["https://example.com"] * 11, [], {"url": 1},
    {"url": "https://example.com", "events": ["started"]},
    {"url": "https://example.com", "events": []},
    {"url": "https://example.com", "secret_env": "X"},
    {"url": "https://example.com", "extra": True},
]


@pytest.fixture
async def served(make_runtime: Callable[..., Awaitable[Runtime]], receiver: Receiver,
                 tmp_path: Path) -> AsyncIterator[tuple[str, Runtime]]:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")],
                                 **(LOOPBACK | {"webhook_allow_private": False}))
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    yield url, runtime
    await runner.cleanup()


async def test_the_routes_take_webhooks_and_refuse_hostile_ones(
        served: tuple[str, Runtime]) -> None:
    url, runtime = served
    async with aiohttp.ClientSession() as http:
        for route in ("/runs", "/sessions"):
            for hostile in [*HOSTILE, "http://127.0.0.1:1/x"]:
                body: dict[str, Any] = {"agent": "a", "webhook": hostile}
                if route == "/runs":
                    body["input"] = "x"
                async with http.post(url + route, json=body) as response:
                    answer = await response.json()
                    if hostile is None:  # no webhook at all
                        assert response.status == 201, answer
                        continue
                    assert response.status == 400, (hostile, answer)
                    assert answer["error"]["code"] == "invalid_webhook", answer
                    assert "webhook" in answer["error"]["message"]
        async with http.post(url + "/runs", json={
                "agent": "a", "input": "x",
                "webhook": {"url": "https://hooks.example.com/t",
                            "events": ["finished", "awaiting_approval"]}}) as response:
            assert response.status == 201
            run_id = (await response.json())["id"]
        await runtime.wait_for_run(run_id, timeout_s=20)
        async with http.get(f"{url}/runs/{run_id}/webhooks") as response:
            listed = await response.json()
        async with http.get(f"{url}/runs/not-a-run/webhooks") as response:
            assert response.status == 404
    assert listed["run_id"] == run_id
    [delivery] = listed["deliveries"]
    assert delivery["url"] == "https://hooks.example.com/t" and delivery["source"] == "run"
    assert delivery["event"] == "finished" and delivery["run_status"] == "completed"
