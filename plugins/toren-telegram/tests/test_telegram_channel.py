"""The telegram channel against a fake Bot API and real Postgres, in one process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psycopg
import pytest
from fake_telegram import FakeTelegram
from telegram_support import FRIEND, until

from toren.errors import ChannelError
from toren.host.chat.pairing import decide_pairing
from toren.host.runtime import Runtime

Agent = Callable[..., Awaitable[Runtime]]
STRANGER = 999


async def sessions(runtime: Runtime) -> list[str]:
    return [run.id for run in await runtime.list_runs(agent="bot", kind="session")]


async def test_a_dm_is_answered_once_in_a_durable_session(fake_telegram: FakeTelegram,
                                                         telegram_agent: Agent) -> None:
    runtime = await telegram_agent()
    fake_telegram.message(10, FRIEND, "hello there")
    await until(lambda: fake_telegram.texts(FRIEND))
    fake_telegram.message(11, FRIEND, "and again")
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    await asyncio.sleep(1.0)  # nothing more arrives
    assert fake_telegram.texts(FRIEND) == ["You said: hello there", "You said: and again"]
    (session_id,) = await sessions(runtime)
    session = await runtime.get_session(session_id)
    assert [e["text"] for e in session["transcript"] if e["role"] == "user"] == [
        "hello there", "and again"]
    # the chat is the session's subject: whom the agent's memory: keeps facts about
    [created] = [e for e in await runtime.events(session_id) if e.type == "RunCreated"]
    assert created.data["subject"] == f"telegram:{FRIEND}"
    assert any(action["action"] == "typing" for action in fake_telegram.actions)
    assert fake_telegram.confirmed >= 12  # both updates acknowledged, after recording


async def test_duplicate_and_out_of_order_updates_start_each_turn_once_in_order(
        fake_telegram: FakeTelegram, telegram_agent: Agent, database_url: str) -> None:
    second = fake_telegram.message(21, FRIEND, "second")
    first = fake_telegram.message(20, FRIEND, "first")
    fake_telegram.add_update(first)  # delivered twice
    runtime = await telegram_agent()
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    fake_telegram.add_update(second)  # redelivered after it was answered
    fake_telegram.add_update(first)
    await asyncio.sleep(1.5)
    assert fake_telegram.texts(FRIEND) == ["You said: first", "You said: second"]
    (session_id,) = await sessions(runtime)
    session = await runtime.get_session(session_id)
    assert [e["text"] for e in session["transcript"] if e["role"] == "user"] == [
        "first", "second"]
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT update_id, status FROM toren_control.channel_updates "
                            "ORDER BY update_id").fetchall()
    assert rows == [("20", "answered"), ("21", "answered")]


async def test_an_unknown_user_gets_one_refusal_and_reaches_no_model(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    runtime = await telegram_agent(pairing=False)
    fake_telegram.message(30, STRANGER, "let me in")
    fake_telegram.message(31, STRANGER, "please")
    fake_telegram.message(32, FRIEND, "hi")
    await until(lambda: fake_telegram.texts(FRIEND) and fake_telegram.texts(STRANGER))
    await asyncio.sleep(1.0)
    (refusal,) = fake_telegram.texts(STRANGER)
    assert "only talk with people my operator has approved" in refusal
    (session_id,) = await sessions(runtime)  # the friend's only
    session = await runtime.get_session(session_id)
    assert [e["text"] for e in session["transcript"] if e["role"] == "user"] == ["hi"]


async def test_pairing_an_unknown_user_with_the_operators_code(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    runtime = await telegram_agent()
    fake_telegram.message(40, STRANGER, "hello?")
    fake_telegram.message(41, STRANGER, "anyone?")
    await until(lambda: fake_telegram.texts(STRANGER))
    await asyncio.sleep(0.8)
    (offer,) = fake_telegram.texts(STRANGER)
    code = offer.split("the code ", 1)[1].split(" ", 1)[0]
    assert await sessions(runtime) == []
    record, decided = await decide_pairing(runtime.store, code.lower(), "approved", "cli:op")
    assert decided and record.user_id == str(STRANGER) and record.status == "approved"
    fake_telegram.message(42, STRANGER, "now?")
    await until(lambda: len(fake_telegram.texts(STRANGER)) == 2)
    assert fake_telegram.texts(STRANGER)[1] == "You said: now?"


async def test_a_5000_character_reply_is_split_at_the_limit_on_line_breaks(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    await telegram_agent()
    lines = [f"line {index:04d} " + "x" * 39 for index in range(100)]
    text = "\n".join(lines)  # the reply is "You said: " and this: 5,009 characters
    assert len("You said: " + text) == 5009
    fake_telegram.message(50, FRIEND, text)
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    await asyncio.sleep(0.5)
    parts = fake_telegram.texts(FRIEND)
    assert len(parts) == 2 and all(len(part) <= 4096 for part in parts)
    assert "\n".join(parts) == "You said: " + text  # cut at a line break, nothing lost
    assert parts[1].startswith("line ")


async def test_429_and_5xx_back_off_and_lose_nothing(fake_telegram: FakeTelegram,
                                                     telegram_agent: Agent) -> None:
    fake_telegram.fail("getUpdates", 502)
    fake_telegram.fail("sendMessage", 429, retry_after=1)
    fake_telegram.fail("sendMessage", 500)
    fake_telegram.message(60, FRIEND, "are you there")
    await telegram_agent()
    await until(lambda: fake_telegram.texts(FRIEND), within=30)
    await asyncio.sleep(1.0)
    assert fake_telegram.texts(FRIEND) == ["You said: are you there"]
    sends = [(at, status) for at, method, status in fake_telegram.calls
             if method == "sendMessage"]
    assert [status for _at, status in sends] == [429, 500, 200]
    assert sends[1][0] - sends[0][0] >= 1.0  # retry_after honoured
    assert next(status for _at, method, status in fake_telegram.calls
                if method == "getUpdates") == 502


async def test_when_busy_reply_answers_still_working(fake_telegram: FakeTelegram,
                                                     telegram_agent: Agent,
                                                     monkeypatch: object) -> None:
    import os

    os.environ["TOREN_SCRIPTED_DELAY"] = "1.5"
    try:
        await telegram_agent(when_busy="reply")
        fake_telegram.message(70, FRIEND, "slow one")
        await until(lambda: fake_telegram.actions)  # the turn started
        fake_telegram.message(71, FRIEND, "hurry")
        await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    finally:
        del os.environ["TOREN_SCRIPTED_DELAY"]
    busy, reply = fake_telegram.texts(FRIEND)
    assert busy.startswith("I'm still working") and reply == "You said: slow one"


async def test_a_message_mid_turn_is_queued_as_the_next_turn(fake_telegram: FakeTelegram,
                                                            telegram_agent: Agent) -> None:
    import os

    os.environ["TOREN_SCRIPTED_DELAY"] = "1.0"
    try:
        await telegram_agent()
        fake_telegram.message(80, FRIEND, "one")
        await until(lambda: fake_telegram.actions)
        fake_telegram.message(81, FRIEND, "two")
        await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    finally:
        del os.environ["TOREN_SCRIPTED_DELAY"]
    assert fake_telegram.texts(FRIEND) == ["You said: one", "You said: two"]


async def test_a_background_notice_is_pushed_into_the_chat(fake_telegram: FakeTelegram,
                                                           telegram_agent: Agent) -> None:
    runtime = await telegram_agent()
    fake_telegram.message(90, FRIEND, "hi")
    await until(lambda: fake_telegram.texts(FRIEND))
    (session_id,) = await sessions(runtime)
    await runtime.notify_channels("bot", session_id, "[background run x] done: 42")
    await runtime.notify_channels("bot", session_id, "[background run x] done: 42")  # again
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    await asyncio.sleep(0.5)
    assert fake_telegram.texts(FRIEND)[1] == "[background run x] done: 42"
    assert len(fake_telegram.texts(FRIEND)) == 2


async def test_a_notice_from_a_worker_beside_the_server_reaches_the_chat(
        fake_telegram: FakeTelegram, telegram_agent: Agent,
        toren_runtime: Callable[..., Awaitable[Runtime]]) -> None:
    """``toren worker`` beside ``toren serve``: the worker runs no channel, yet the notice it
    committed reaches the chat once, sent by the process holding the channel."""
    server = await telegram_agent()
    fake_telegram.message(95, FRIEND, "hi")
    await until(lambda: fake_telegram.texts(FRIEND))
    (session_id,) = await sessions(server)
    worker = await toren_runtime([server.agents["bot"].directory],
                                 load_plugins=("toren-telegram",))
    assert not worker._channels  # this process started no channel
    await worker.notify_channels("bot", session_id, "[background run y] done: 7")
    await worker.notify_channels("bot", session_id, "[background run y] done: 7")  # again
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    await asyncio.sleep(1.0)
    assert fake_telegram.texts(FRIEND)[1] == "[background run y] done: 7"
    assert len(fake_telegram.texts(FRIEND)) == 2
    await worker.notify_channels("bot", "0b5c3c9e-0000-4000-8000-000000000000", "no chat")
    await asyncio.sleep(1.0)
    assert len(fake_telegram.texts(FRIEND)) == 2  # a session no chat owns: nothing sent


async def test_text_postgres_cannot_store_is_cleaned_and_jams_nothing(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    await telegram_agent()
    fake_telegram.message(95, FRIEND, "bad \x00 byte")  # Postgres text cannot hold NUL
    fake_telegram.message(96, FRIEND, "lone \ud800 surrogate")
    fake_telegram.message(97, FRIEND, "fine")
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 3)
    assert fake_telegram.texts(FRIEND) == ["You said: bad \ufffd byte",
                                           "You said: lone \ufffd surrogate", "You said: fine"]


async def test_a_permanent_refusal_is_given_up_and_the_next_message_still_goes(
        fake_telegram: FakeTelegram, telegram_agent: Agent, database_url: str) -> None:
    fake_telegram.fail("sendMessage", 403)  # the user blocked the bot
    fake_telegram.message(98, FRIEND, "one")
    await telegram_agent()
    await until(lambda: any(method == "sendMessage" for _at, method, _s in fake_telegram.calls))
    fake_telegram.message(99, FRIEND, "two")
    await until(lambda: fake_telegram.texts(FRIEND))
    await asyncio.sleep(1.0)
    assert fake_telegram.texts(FRIEND) == ["You said: two"]
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT key LIKE 'reply:%%:1:0', sent_at IS NOT NULL, "
                            "last_error LIKE '%%403%%' FROM toren_control.channel_sends "
                            "ORDER BY seq").fetchall()
    assert rows == [(True, True, True), (False, True, None)]


async def test_a_wrong_token_stops_startup_naming_the_agent(
        fake_telegram: FakeTelegram, telegram_agent: Agent,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TG_TOKEN", "999:revoked")
    with pytest.raises(ChannelError) as caught:
        await telegram_agent()
    assert "telegram channel of agent bot cannot start" in caught.value.message
    assert "401" in caught.value.message and "revoked" not in caught.value.message
