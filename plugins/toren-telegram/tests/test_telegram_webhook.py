"""Webhook mode (secret_token checked) and approvals as inline buttons."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import psycopg
import pytest
from aiohttp import web
from fake_telegram import TOKEN, FakeTelegram
from telegram_support import FRIEND, telegram_settings, until

from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

SECRET = "s3cret-token_value"
TOOLS = '''
def ring_bell(note: str) -> str:
    """Ring the office bell."""
    return "rang: " + note
'''


async def serve(runtime: Runtime) -> tuple[web.AppRunner, str]:
    return await serve_on_free_port(create_app(runtime, require_keys=True))


@pytest.fixture
async def webhook_bot(fake_telegram: FakeTelegram, toren_runtime: Callable[..., Awaitable[Runtime]],
                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                      ) -> AsyncIterator[tuple[Runtime, str]]:
    monkeypatch.setenv("TEST_TG_TOKEN", TOKEN)
    monkeypatch.setenv("TEST_TG_SECRET", SECRET)
    directory = write_agent_dir(tmp_path, "bot", channels={"telegram": telegram_settings(
        fake_telegram, mode="webhook", webhook_url="https://bot.example/channels/telegram/bot",
        webhook_secret_env="TEST_TG_SECRET")})
    runtime = await toren_runtime([directory], load_plugins=("toren-telegram",))
    await runtime.start_channels()
    runner, url = await serve(runtime)
    yield runtime, f"{url}/channels/telegram/bot"
    await runner.cleanup()
    await runtime.stop_channels()


def update(update_id: int, text: str) -> dict[str, object]:
    return {"update_id": update_id, "message": {
        "message_id": 1, "date": 0, "text": text, "chat": {"id": FRIEND, "type": "private"},
        "from": {"id": FRIEND, "is_bot": False, "first_name": "F"}}}


async def test_webhook_calls_need_the_secret_token_and_are_recorded_once(
        fake_telegram: FakeTelegram, webhook_bot: tuple[Runtime, str],
        database_url: str) -> None:
    _runtime, url = webhook_bot
    body = json.dumps(update(300, "by webhook"))
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
            async with http.post(url, data=body, headers=headers) as response:
                assert response.status == 401
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT count(*) FROM toren_control.channel_updates"
                                ).fetchone() == (0,)
        good = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        for _ in range(2):  # Telegram redelivers when it misses the answer
            async with http.post(url, data=body, headers=good) as response:
                assert response.status == 200
        for hostile in (b"{not json", b"[1, 2]", json.dumps({"update_id": "x"}).encode(),
                        b"x" * 300_000):
            async with http.post(url, data=hostile, headers=good) as response:
                assert response.status in (400, 413)
        async with http.post(url.replace("/bot", "/nobody"), data=body,
                             headers=good) as response:
            assert response.status == 404
    await until(lambda: fake_telegram.texts(FRIEND))
    await asyncio.sleep(0.8)
    assert fake_telegram.texts(FRIEND) == ["You said: by webhook"]
    assert fake_telegram.calls and not any(method == "getUpdates"
                                           for _at, method, _s in fake_telegram.calls)


async def test_an_approval_is_offered_as_buttons_and_a_press_decides_it(
        fake_telegram: FakeTelegram, toren_runtime: Callable[..., Awaitable[Runtime]],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TG_TOKEN", TOKEN)
    directory = write_agent_dir(tmp_path, "bot", tools_py=TOOLS,
                                approvals={"ring_bell": {}},
                                channels={"telegram": telegram_settings(fake_telegram)})
    runtime = await toren_runtime([directory], load_plugins=("toren-telegram",))
    await runtime.start_channels()
    try:
        fake_telegram.message(400, FRIEND, "ring it")
        await until(lambda: fake_telegram.texts(FRIEND))
        (offer,) = [body for body in fake_telegram.sent if "reply_markup" in body]
        assert "ring_bell" in offer["text"]
        approve, always, deny = offer["reply_markup"]["inline_keyboard"][0]
        assert (approve["text"], always["text"], deny["text"]) == (
            "Approve", "Approve always", "Deny")
        fake_telegram.press(401, 555, approve["callback_data"])  # a stranger's press: refused
        fake_telegram.press(402, FRIEND, always["callback_data"])
        await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
        assert "rang: " in fake_telegram.texts(FRIEND)[1]
        notes = [body["text"] for body in fake_telegram.answered]
        assert sorted(notes) == [  # chats are handled apart
            "Approved, and approved always for the same call in this chat's session.",
            "Not allowed."]
        (approval,) = await runtime.list_approvals(status="approved")
        assert (approval.decided_by, approval.scope) == (f"telegram:{FRIEND}", "run")
        # the same call again in this session: approved without offering buttons
        offers = len([body for body in fake_telegram.sent if "reply_markup" in body])
        fake_telegram.message(403, FRIEND, "ring it")
        await until(lambda: len(fake_telegram.texts(FRIEND)) == 3)
        assert "rang: " in fake_telegram.texts(FRIEND)[2]
        assert len([body for body in fake_telegram.sent if "reply_markup" in body]) == offers
        again = [a for a in await runtime.list_approvals(status="approved") if a.granted_by]
        assert [a.granted_by for a in again] == [approval.id]
    finally:
        await runtime.stop_channels()
