"""ask_user over the telegram channel (fake Bot API, real Postgres): the agent's question is
sent to the chat once, and the person's next message answers it instead of starting a turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from fake_telegram import TOKEN, FakeTelegram
from telegram_support import FRIEND, telegram_settings, until

from toren.host.runtime import Runtime
from toren.testing import write_agent_dir


async def test_the_question_reaches_the_chat_and_the_next_message_answers_it(
        fake_telegram: FakeTelegram, toren_runtime: Callable[..., Awaitable[Runtime]],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TG_TOKEN", TOKEN)
    directory = write_agent_dir(tmp_path / "agents", "bot", askUser=True,
                                channels={"telegram": telegram_settings(fake_telegram)})
    runtime = await toren_runtime([directory], load_plugins=("toren-telegram",))
    await runtime.start_channels()
    try:
        # toren/scripted calls ask_user with the message as the question
        fake_telegram.message(10, FRIEND, "Which colour for the shed?")
        await until(lambda: fake_telegram.texts(FRIEND))
        assert fake_telegram.texts(FRIEND) == ["Which colour for the shed?"]
        fake_telegram.message(11, FRIEND, "blue")
        await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
        await asyncio.sleep(1.0)  # nothing more arrives: the question was sent once
        texts = fake_telegram.texts(FRIEND)
        assert len(texts) == 2 and "ask_user: blue" in texts[1]
        (session,) = await runtime.list_runs(agent="bot", kind="session")
        found = await runtime.get_session(session.id)
        # one turn: the answer went to the question, not into a UserMessage of its own
        assert [e["text"] for e in found["transcript"] if e["role"] == "user"] == [
            "Which colour for the shed?"]
        assert found["pending_questions"] == []
    finally:
        await runtime.stop_channels()
