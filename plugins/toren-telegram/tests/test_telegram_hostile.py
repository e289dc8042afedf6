"""Hostile input on the telegram channel: forged, copied and replayed approval buttons, and
webhook bodies nested too deep. Against the fake Bot API, real Postgres and a real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_telegram import TOKEN, FakeTelegram
from telegram_support import FRIEND, telegram_settings, until

from toren.core.approvals import ApprovalRecord
from toren.host.chat.buttons import NOT_VALID_TEXT
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

Make = Callable[..., Awaitable[Runtime]]
Serve = Callable[[list[Path]], Awaitable[Runtime]]
#: A second allowed person, with a chat (and a session) of their own.
NEIGHBOUR = 222
TOOLS = '''
def ring_bell(note: str) -> str:
    """Ring the office bell."""
    return "rang: " + note
'''


@pytest.fixture
def agents(tmp_path: Path, fake_telegram: FakeTelegram,
           monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[Path]]:
    """``agents(**bot_settings)``: agent ``bot`` (telegram, ``ring_bell`` needs approval) and
    agent ``desk`` (the same tool, no chat channel at all)."""
    monkeypatch.setenv("TEST_TG_TOKEN", TOKEN)

    def make(approvals: dict[str, Any] | None = None, **settings: Any) -> list[Path]:
        settings = {"allow_from": [FRIEND, NEIGHBOUR]} | settings
        return [write_agent_dir(tmp_path / "agents", "bot", tools_py=TOOLS,
                                approvals=approvals or {"ring_bell": {}},
                                channels={"telegram": telegram_settings(fake_telegram,
                                                                        **settings)}),
                write_agent_dir(tmp_path / "agents", "desk", tools_py=TOOLS,
                                approvals={"ring_bell": {}})]

    return make


@pytest.fixture
async def serve(toren_runtime: Make) -> AsyncIterator[Callable[[list[Path]], Awaitable[Runtime]]]:
    """``await serve(dirs)``: a started runtime with its channels started (stopped after)."""
    started: list[Runtime] = []

    async def make(dirs: list[Path]) -> Runtime:
        runtime = await toren_runtime(dirs, load_plugins=("toren-telegram",))
        started.append(runtime)
        await runtime.start_channels()
        return runtime

    yield make
    for runtime in started:
        await runtime.stop_channels()


async def pending(runtime: Runtime, agent: str, count: int = 1) -> list[ApprovalRecord]:
    """The agent's pending approvals, once there are ``count``."""
    for _ in range(400):
        found = await runtime.list_approvals(agent=agent, status="pending")
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{agent} has no {count} pending approvals")


def buttons(fake: FakeTelegram, chat: int) -> tuple[str, str]:
    """The callback data of the Approve and Deny buttons offered in ``chat``."""
    (offer,) = [body for body in fake.sent
                if "reply_markup" in body and str(body["chat_id"]) == str(chat)]
    approve, _always, deny = offer["reply_markup"]["inline_keyboard"][0]
    return approve["callback_data"], deny["callback_data"]


def notes(fake: FakeTelegram) -> list[str]:
    with fake.lock:
        return [body["text"] for body in fake.answered]


async def test_only_a_button_shown_in_the_chat_decides_and_only_once(
        fake_telegram: FakeTelegram, serve: Serve, agents: Callable[..., list[Path]]) -> None:
    runtime = await serve(agents())
    desk_run = await runtime.start_run("desk", "ring the desk bell")
    (desk,) = await pending(runtime, "desk")
    assert desk.run_id == desk_run
    fake_telegram.message(500, FRIEND, "ring it")
    fake_telegram.message(501, NEIGHBOUR, "ring mine")
    await until(lambda: len([body for body in fake_telegram.sent if "reply_markup" in body]) == 2)
    fake_telegram.press(502, FRIEND, f"a:{desk.id}")  # the report: an agent with no channel
    await until(lambda: notes(fake_telegram))
    assert notes(fake_telegram) == [NOT_VALID_TEXT]
    assert (await runtime.get_approval(desk.id)).status == "pending"
    approve, deny = buttons(fake_telegram, FRIEND)
    neighbours_approve, _ = buttons(fake_telegram, NEIGHBOUR)
    assert len(approve.encode()) <= 64 and len(deny.encode()) <= 64  # Telegram's limit
    (mine,) = [record for record in await pending(runtime, "bot", 2)
               if approve.split(":")[1] == record.id]
    letter, approval_id, mac = approve.split(":")
    hostile = [
        f"d:{desk.id}",                      # the report's other button
        f"a:{mine.id}",                      # this chat's approval, unsigned (the old form)
        neighbours_approve,                  # a real button, from another chat
        f"{letter}:{desk.id}:{mac}",         # this chat's signature on another approval
        f"d:{approval_id}:{mac}",            # Approve's signature on Deny
        f"a:{approval_id}:{'A' * 22}",       # a made-up signature
        approve + "x", "", "a:" + "9" * 200,  # junk
    ]
    for offset, data in enumerate(hostile):
        fake_telegram.press(510 + offset, FRIEND, data)
    await until(lambda: len(notes(fake_telegram)) == 1 + len(hostile))
    assert notes(fake_telegram) == [NOT_VALID_TEXT] * (1 + len(hostile))
    assert len(await runtime.list_approvals(status="pending")) == 3  # nothing was decided
    assert not any("rang: " in text for text in fake_telegram.texts())

    fake_telegram.press(530, FRIEND, approve)  # the button shown in this chat
    await until(lambda: any("rang: " in text for text in fake_telegram.texts(FRIEND)))
    fake_telegram.press(531, FRIEND, approve)  # pressed again, and the other one
    fake_telegram.press(532, FRIEND, deny)
    await until(lambda: len(notes(fake_telegram)) == 1 + len(hostile) + 3)
    approved, *replays = notes(fake_telegram)[1 + len(hostile):]
    assert approved == "Approved."
    assert all("already decided: approved by telegram:111" in note for note in replays)
    decided = await runtime.get_approval(mine.id)
    assert (decided.status, decided.decided_by) == ("approved", f"telegram:{FRIEND}")
    assert len([text for text in fake_telegram.texts(FRIEND) if "rang: " in text]) == 1
    still = {record.agent for record in await runtime.list_approvals(status="pending")}
    assert still == {"bot", "desk"}  # the neighbour's and the desk's


async def test_a_chat_user_the_approvers_do_not_name_decides_nothing(
        fake_telegram: FakeTelegram, serve: Serve, agents: Callable[..., list[Path]]) -> None:
    dirs = agents(approvals={"ring_bell": {"approvers": [f"telegram:{NEIGHBOUR}",
                                                         "cli:alice"]}})
    runtime = await serve(dirs)
    fake_telegram.message(600, FRIEND, "ring it")
    await until(lambda: any("reply_markup" in body for body in fake_telegram.sent))
    approve, _deny = buttons(fake_telegram, FRIEND)
    fake_telegram.press(601, FRIEND, approve)
    await until(lambda: notes(fake_telegram))
    (note,) = notes(fake_telegram)
    assert note.startswith("telegram:111 may not decide approval") and "cli:alice" in note
    (waiting,) = await pending(runtime, "bot")
    approved = await runtime.approve(waiting.id, decided_by="cli:alice")  # the operator can
    assert approved.status == "approved"


async def test_a_button_stays_valid_after_a_restart(
        fake_telegram: FakeTelegram, serve: Serve, agents: Callable[..., list[Path]]) -> None:
    dirs = agents()
    first = await serve(dirs)
    fake_telegram.message(700, FRIEND, "ring it")
    await until(lambda: any("reply_markup" in body for body in fake_telegram.sent))
    approve, _deny = buttons(fake_telegram, FRIEND)
    await first.stop_channels()
    await first.stop()
    await serve(dirs)  # as another process would, on the same database
    fake_telegram.press(701, FRIEND, approve)
    await until(lambda: any("rang: " in text for text in fake_telegram.texts(FRIEND)))
    assert notes(fake_telegram) == ["Approved."]


def nested(depth: int) -> bytes:
    """An update whose extra field nests ``depth`` arrays."""
    return (b'{"update_id": 5, "extra": ' + b"[" * depth + b"]" * depth + b"}")


async def test_deep_json_on_the_webhook_is_400_and_the_server_keeps_serving(
        fake_telegram: FakeTelegram, serve: Serve, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TG_TOKEN", TOKEN)
    monkeypatch.setenv("TEST_TG_SECRET", "s3cret")
    directory = write_agent_dir(tmp_path, "bot", channels={"telegram": telegram_settings(
        fake_telegram, mode="webhook", webhook_url="https://bot.example/channels/telegram/bot",
        webhook_secret_env="TEST_TG_SECRET")})
    runtime = await serve([directory])
    runner, base = await serve_on_free_port(create_app(runtime, require_keys=True))
    url, headers = f"{base}/channels/telegram/bot", {"X-Telegram-Bot-Api-Secret-Token": "s3cret"}
    try:
        async with aiohttp.ClientSession() as http:
            for body in (b"[" * 5000 + b"]" * 5000, nested(5000), nested(129)):
                async with http.post(url, data=body, headers=headers) as response:
                    assert response.status == 400
                    error = (await response.json())["error"]
                    assert error["code"] == "bad_request"
                    assert "nested at most 128 levels" in error["message"]
            async with http.post(url, data=nested(127), headers=headers) as response:
                assert response.status == 200  # within the rule (an update with nothing to do)
            update = {"update_id": 6, "message": {
                "message_id": 1, "date": 0, "text": "still there?",
                "chat": {"id": FRIEND, "type": "private"},
                "from": {"id": FRIEND, "is_bot": False, "first_name": "F"}}}
            async with http.post(url, data=json.dumps(update), headers=headers) as response:
                assert response.status == 200
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200
        await until(lambda: fake_telegram.texts(FRIEND))
        assert fake_telegram.texts(FRIEND) == ["You said: still there?"]
    finally:
        await runner.cleanup()
