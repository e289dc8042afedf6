"""The slack channel over the Events API: signed requests to a real ``toren dev`` process,
replies through the fake Web API, everything durable in real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aiohttp
from fake_slack import FakeSlack
from slack_support import (
    DM,
    FRIEND,
    GENERAL,
    Dev,
    channel_message,
    dm,
    mention,
    own_message,
    post,
    rows,
    until,
)


async def test_a_dm_and_a_mentions_thread_are_answered_each_in_its_own_session(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    dev = slack_dev(slack_agent())
    async with aiohttp.ClientSession() as http:
        assert await post(http, dev.events, dm("hello there", "1700000001.000100")) == 200
        await until(lambda: fake_slack.texts(DM))
        (reply,) = [body for body in fake_slack.posts if body["channel"] == DM]
        assert reply["text"] == "You said: hello there" and "thread_ts" not in reply

        root = "1700000002.000200"
        assert await post(http, dev.events, mention("what is up?", root)) == 200
        await until(lambda: fake_slack.texts(GENERAL, root))
        assert fake_slack.texts(GENERAL, root) == ["You said: what is up?"]
        # the thread is the chat now: a reply in it needs no mention
        assert await post(http, dev.events, channel_message(
            "and more", "1700000003.000300", thread_ts=root)) == 200
        await until(lambda: len(fake_slack.texts(GENERAL, root)) == 2)
        # not for the agent: the channel outside a thread, another thread, its own message
        for body in (channel_message("lunch?", "1700000004.000400"),
                     channel_message("sure", "1700000005.000500",
                                     thread_ts="1700000004.000400"),
                     own_message("You said: hello there", "1700000006.000600")):
            assert await post(http, dev.events, body) == 200
        assert await post(http, dev.events, dm("again", "1700000007.000700")) == 200
        await until(lambda: len(fake_slack.texts(DM)) == 2)
    await asyncio.sleep(1.0)  # nothing more arrives
    assert fake_slack.texts(DM) == ["You said: hello there", "You said: again"]
    assert fake_slack.texts(GENERAL) == ["You said: what is up?", "You said: and more"]
    assert all(body["thread_ts"] == root for body in fake_slack.posts
               if body["channel"] == GENERAL)
    chats = rows(database_url, "SELECT chat_id FROM toren_control.channel_chats "
                               "WHERE channel = 'slack' ORDER BY chat_id")
    assert chats == [(f"{GENERAL}:{root}",), (DM,)]
    assert rows(database_url, "SELECT count(*) FROM agent_bot.runs WHERE kind = 'session'"
                ) == [(2,)]
    assert {user for (user,) in rows(database_url, "SELECT DISTINCT user_id FROM "
                                                   "toren_control.channel_updates")} == {FRIEND}
