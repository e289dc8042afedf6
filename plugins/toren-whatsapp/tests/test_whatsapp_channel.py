"""The whatsapp channel: signed webhooks on a real Toren server, a fake Graph API, Postgres."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import psycopg
import pytest
from fake_graph import APP_SECRET, FRIEND, PHONE_ID, VERIFY_TOKEN, FakeGraph
from toren_whatsapp.signature import sign

from toren.errors import ChannelError
from toren.host.runtime import Runtime

Agent = Callable[..., Awaitable[tuple[Runtime, str]]]
STRANGER = "15559990000"


async def until(predicate: Callable[[], object], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    assert predicate(), "timed out"


def notification(*messages: dict[str, Any], phone_id: str = PHONE_ID) -> dict[str, Any]:
    return {"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [{
        "field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550000000", "phone_number_id": phone_id},
            "contacts": [{"wa_id": m["from"], "profile": {"name": "Ann"}} for m in messages],
            "messages": list(messages)}}]}]}


def text(message_id: str, sender: str, body: str, timestamp: int = 1_700_000_000
         ) -> dict[str, Any]:
    return {"from": sender, "id": message_id, "timestamp": str(timestamp), "type": "text",
            "text": {"body": body}}


async def post(http: aiohttp.ClientSession, url: str, raw: bytes,
               signature: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    async with http.post(url, data=raw, headers=headers) as response:
        return response.status


def recorded(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM toren_control.channel_updates").fetchone()
    assert row is not None
    return int(row[0])


async def test_the_verification_handshake_echoes_the_challenge_only_for_the_token(
        whatsapp_agent: Agent) -> None:
    _runtime, url = await whatsapp_agent()
    async with aiohttp.ClientSession() as http:
        good = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN,
                "hub.challenge": "1158201444"}
        async with http.get(url, params=good) as response:
            assert response.status == 200 and await response.text() == "1158201444"
        for bad in (good | {"hub.verify_token": "nope"}, good | {"hub.mode": "unsubscribe"},
                    {"hub.challenge": "1"}):
            async with http.get(url, params=bad) as response:
                assert response.status == 403


async def test_a_bad_or_missing_signature_is_401_and_nothing_is_recorded(
        whatsapp_agent: Agent, fake_graph: FakeGraph, database_url: str) -> None:
    _runtime, url = await whatsapp_agent()
    raw = json.dumps(notification(text("wamid.A", FRIEND, "hi"))).encode()
    reformatted = json.dumps(json.loads(raw), indent=2).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, raw, None) == 401
        assert await post(http, url, raw, sign(raw, "another-secret")) == 401
        assert await post(http, url, raw, "sha1=" + sign(raw, APP_SECRET)[7:]) == 401
        assert await post(http, url, raw, "sha256=") == 401
        # the signature covers the raw bytes: the same JSON, reformatted, does not match
        assert await post(http, url, reformatted, sign(raw, APP_SECRET)) == 401
        huge = io.BytesIO(b"x" * (1024 * 1024 + 10))
        async with http.post(url, data=huge, headers={
                "X-Hub-Signature-256": sign(raw, APP_SECRET)}) as response:
            assert response.status == 413
    await asyncio.sleep(0.5)
    assert recorded(database_url) == 0 and fake_graph.sent == []


async def test_a_signed_message_is_answered_once_through_the_graph_api_whatever_duplicates(
        whatsapp_agent: Agent, fake_graph: FakeGraph, database_url: str) -> None:
    runtime, url = await whatsapp_agent()
    # two messages in one call, the later one first; then the call is delivered again
    raw = json.dumps(notification(text("wamid.2", FRIEND, "second", 1_700_000_002),
                                  text("wamid.1", FRIEND, "first", 1_700_000_001))).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
        await until(lambda: len(fake_graph.texts(FRIEND)) == 2)
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200  # after the answers
        bad = json.dumps(notification(text("wamid.3", FRIEND, "x"), phone_id="other")).encode()
        assert await post(http, url, bad, sign(bad, APP_SECRET)) == 200  # not our number
        malformed = b"{not json"
        assert await post(http, url, malformed, sign(malformed, APP_SECRET)) == 400
    await asyncio.sleep(1.0)
    assert fake_graph.texts(FRIEND) == ["You said: first", "You said: second"]
    assert recorded(database_url) == 2
    (session,) = await runtime.list_runs(agent="bot", kind="session")
    assert session.kind == "session"


async def test_an_unknown_number_gets_one_refusal_and_reaches_no_model(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    runtime, url = await whatsapp_agent(pairing=False)
    async with aiohttp.ClientSession() as http:
        for index in range(3):
            raw = json.dumps(notification(text(f"wamid.s{index}", STRANGER, "hey"))).encode()
            assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
    await until(lambda: fake_graph.texts(STRANGER))
    await asyncio.sleep(1.0)
    (refusal,) = fake_graph.texts(STRANGER)
    assert "only talk with people my operator has approved" in refusal
    assert await runtime.list_runs(agent="bot", kind="session") == []


async def test_429_and_5xx_from_the_graph_api_back_off_and_lose_nothing(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    fake_graph.fail(429, 130429, retry_after="1")
    fake_graph.fail(503, 2)
    _runtime, url = await whatsapp_agent()
    raw = json.dumps(notification(text("wamid.r", FRIEND, "retry me"))).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
    await until(lambda: fake_graph.texts(FRIEND), within=30)
    await asyncio.sleep(0.5)
    assert fake_graph.texts(FRIEND) == ["You said: retry me"]
    statuses = [status for _at, status in fake_graph.calls]
    assert statuses == [429, 503, 200]
    assert fake_graph.calls[1][0] - fake_graph.calls[0][0] >= 1.0  # Retry-After honoured


async def test_a_long_reply_is_split_below_the_cloud_api_limit(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    _runtime, url = await whatsapp_agent()
    body = ("Sentence number one is here. " * 170).strip()  # ~4,900 characters
    raw = json.dumps(notification(text("wamid.long", FRIEND, body))).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200
    await until(lambda: len(fake_graph.texts(FRIEND)) == 2)
    parts = fake_graph.texts(FRIEND)
    assert all(len(part) <= 4096 for part in parts)
    assert parts[0].endswith(".")  # cut after a sentence
    assert " ".join(parts) == "You said: " + body


async def test_a_wrong_phone_number_id_stops_startup(whatsapp_agent: Agent) -> None:
    with pytest.raises(ChannelError) as caught:
        await whatsapp_agent(phone_number_id="000")
    assert "whatsapp channel of agent bot cannot start" in caught.value.message
    assert "phone number id 000" in caught.value.message
