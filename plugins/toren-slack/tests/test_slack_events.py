"""The slack channel over the Events API: signed requests to a real ``toren dev`` process,
replies through the fake Web API, everything durable in real Postgres."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from fake_slack import FakeSlack
from slack_support import (
    DM,
    FRIEND,
    GENERAL,
    STRANGER,
    Dev,
    callback,
    channel_message,
    dm,
    mention,
    own_message,
    post,
    press,
    press_form,
    rows,
    signed_headers,
    slack_settings,
    until,
)

#: What the base answers a press whose value was not signed for the chat it came from.
NOT_VALID_TEXT = "This button is not valid here: nothing was decided."
#: A second allowed person and their DM.
OTHER = "U0OTHER01"
OTHER_DM = "D0DMOTHER"
TOOLS = '''
def ring_bell(note: str) -> str:
    """Ring the office bell."""
    return "rang: " + note
'''


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


async def test_duplicate_and_retried_events_start_one_turn(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    dev = slack_dev(slack_agent())
    first = dm("once only", "1700000010.000100")
    root = "1700000011.000100"
    async with aiohttp.ClientSession() as http:
        assert await post(http, dev.events, first) == 200
        # Slack missed the answer (or thought it slow): the same event_id, marked as a retry
        for attempt, reason in ((1, "http_timeout"), (2, "http_error")):
            raw = json.dumps(first).encode()
            assert await post(http, dev.events, raw, headers=signed_headers(raw) | {
                "X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": reason}) == 200
        assert await post(http, dev.events, mention("in a thread", root)) == 200
        await until(lambda: fake_slack.texts(GENERAL, root))
        # a mention inside the thread: Slack sends app_mention and message for one message
        ts = "1700000012.000100"
        inside = mention("and you?", ts, thread_ts=root)
        also = channel_message(inside["event"]["text"], ts, thread_ts=root)
        for body in (inside, also, inside):
            assert await post(http, dev.events, body) == 200
        await until(lambda: len(fake_slack.texts(GENERAL, root)) == 2)
    await asyncio.sleep(1.5)
    assert fake_slack.texts(DM) == ["You said: once only"]
    assert fake_slack.texts(GENERAL, root) == ["You said: in a thread", "You said: and you?"]
    assert rows(database_url, "SELECT update_id, status FROM toren_control.channel_updates "
                              "ORDER BY seq") == [
        (f"{DM}:1700000010.000100", "answered"), (f"{GENERAL}:{root}", "answered"),
        (f"{GENERAL}:{ts}", "answered")]


async def test_an_approval_is_offered_as_buttons_and_a_press_decides_it(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    dev = slack_dev(slack_agent(tools_py=TOOLS, approvals={"ring_bell": {}}))
    root = "1700000020.000100"
    async with aiohttp.ClientSession() as http:
        assert await post(http, dev.events, mention("ring it", root)) == 200
        await until(lambda: fake_slack.posts)
        (offer,) = fake_slack.posts
        assert offer["thread_ts"] == root and "ring_bell" in offer["text"]
        section, actions = offer["blocks"]
        assert section["type"] == "section" and "ring_bell" in section["text"]["text"]
        approve, always, deny = actions["elements"]
        assert (approve["text"]["text"], always["text"]["text"], deny["text"]["text"]) == (
            "Approve", "Approve always", "Deny")
        assert approve["type"] == deny["type"] == "button"
        # a stranger's press, and a forged value: nothing decided
        for payload in (press(approve["value"], user=STRANGER, channel=GENERAL,
                              thread_ts=root),
                        press(approve["value"][:-1] + "x", channel=GENERAL, thread_ts=root),
                        press(approve["value"], channel=DM)):  # shown in another chat
            assert await post(http, dev.interactivity, press_form(payload)) == 200
        await until(lambda: len(fake_slack.ephemerals) == 3)
        assert rows(database_url, "SELECT status FROM toren_control.approvals") == [
            ("pending",)]
        assert await post(http, dev.interactivity, press_form(
            press(approve["value"], channel=GENERAL, thread_ts=root))) == 200
        await until(lambda: any("rang: " in text for text in fake_slack.texts(GENERAL, root)))
    notes = {(body["user"], body["text"], body.get("thread_ts")) for body in
             fake_slack.ephemerals}
    assert notes == {(STRANGER, "Not allowed.", root), (FRIEND, NOT_VALID_TEXT, root),
                     (FRIEND, NOT_VALID_TEXT, None), (FRIEND, "Approved.", root)}
    assert rows(database_url, "SELECT status, decided_by FROM toren_control.approvals") == [
        ("approved", f"slack:{FRIEND}")]


async def test_a_429_waits_its_retry_after_and_the_reply_is_sent_once(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    fake_slack.fail(DM, 429, "ratelimited", retry_after="1")
    fake_slack.fail(OTHER_DM, 200, "channel_not_found")  # permanent: given up at once
    dev = slack_dev(slack_agent(settings=slack_settings(fake_slack,
                                                        allow_from=[FRIEND, OTHER])))
    async with aiohttp.ClientSession() as http:
        assert await post(http, dev.events, dm("are you there", "1700000030.000100")) == 200
        await until(lambda: fake_slack.texts(DM))
        # one after the other: sends claimed beside a 429 wait out their claim (see report)
        assert await post(http, dev.events, dm("hi", "1700000031.000100", user=OTHER,
                                               channel=OTHER_DM)) == 200
        await until(lambda: rows(database_url, "SELECT count(*) FROM toren_control."
                                               "channel_sends WHERE sent_at IS NULL") == [(0,)])
        assert await post(http, dev.events, dm("still?", "1700000032.000100", user=OTHER,
                                               channel=OTHER_DM)) == 200
        await until(lambda: fake_slack.texts(OTHER_DM))
    await asyncio.sleep(1.0)
    assert fake_slack.texts(DM) == ["You said: are you there"]
    assert fake_slack.texts(OTHER_DM) == ["You said: still?"]
    posts = [(at, status) for at, method, status in fake_slack.calls
             if method == "chat.postMessage"]
    assert [status for _at, status in posts] == [429, 200, 200, 200]
    assert posts[1][0] - posts[0][0] >= 1.0  # Retry-After honoured
    settled = rows(database_url, "SELECT chat_id, sent_at IS NOT NULL, last_error FROM "
                                 "toren_control.channel_sends WHERE last_error IS NOT NULL "
                                 "ORDER BY seq")
    assert [(chat, sent) for chat, sent, _error in settled] == [(DM, True), (OTHER_DM, True)]
    assert "ratelimited" in settled[0][2] and "channel_not_found" in settled[1][2]


async def test_a_429_to_one_chat_pauses_the_rest_of_the_batch_only_as_long_as_asked(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    # two replies due in one pass: the first chat's is rate limited (Retry-After: 2); the
    # second's was claimed with it and is given back, due after the same pause, not after
    # the claim's minute, and without an attempt counted for it
    fake_slack.fail(DM, 429, "ratelimited", retry_after="2")
    dev = slack_dev(slack_agent(settings=slack_settings(fake_slack,
                                                        allow_from=[FRIEND, OTHER])))
    assert dev.events
    rows(database_url, "INSERT INTO toren_control.channel_sends "
                       "(channel, agent, key, chat_id, text, payload) VALUES "
                       "('slack', 'bot', 'first', %s, 'to the first chat', '{}'), "
                       "('slack', 'bot', 'second', %s, 'to the second chat', '{}') "
                       "RETURNING key", DM, OTHER_DM)
    await until(lambda: fake_slack.texts(OTHER_DM), within=20.0)
    await until(lambda: fake_slack.texts(DM), within=20.0)
    posts = [(at, status) for at, method, status in fake_slack.calls
             if method == "chat.postMessage"]
    assert [status for _at, status in posts] == [429, 200, 200]
    assert posts[1][0] - posts[0][0] >= 2.0  # the rest waited the pause the platform asked
    assert rows(database_url, "SELECT key, attempts FROM toren_control.channel_sends "
                              "ORDER BY seq") == [("first", 2), ("second", 1)]


def nested(depth: int) -> bytes:
    """An event_callback whose extra field nests ``depth`` arrays."""
    return (b'{"type": "event_callback", "event_id": "Ev1", "event": {}, "extra": '
            + b"[" * depth + b"]" * depth + b"}")


async def test_hostile_requests_are_refused_and_lose_nothing(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev], database_url: str) -> None:
    dev = slack_dev(slack_agent())
    good = dm("the real one", "1700000045.000100")  # after the NUL one: a chat keeps order
    raw = json.dumps(good).encode()
    now = int(time.time())
    async with aiohttp.ClientSession() as http:
        unsigned: list[dict[str, str]] = [
            {},                                                      # no headers at all
            signed_headers(raw, secret="not-the-secret"),            # another app's secret
            # past the 5 minutes either way by a minute: the requests go out seconds after
            # `now` (from the future by 301 s, one that went out a second later was 300 s
            # ahead, within the limit, and taken); the exact bounds: test_slack_parsing.py
            signed_headers(raw, timestamp=str(now - 360)),           # replayed, too old
            signed_headers(raw, timestamp=str(now + 360)),           # from the future
            signed_headers(raw) | {"X-Slack-Request-Timestamp": str(now - 1)},  # not signed
            signed_headers(raw, timestamp="1e9"),                    # not a number
            {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": "v0=" + "0" * 64},
            {k: v.upper() for k, v in signed_headers(raw).items()},  # v0= upper-cased
            {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": "v0=\u00e9"},
        ]
        bodies = set()
        for headers in unsigned:
            async with http.post(dev.events, data=raw, headers=headers) as response:
                assert response.status == 401, headers
                bodies.add(await response.text())
        assert len(bodies) == 1  # which check failed is not said
        # signed, but not what a Slack request is
        for body, status in ((b"x" * 300_000, 413), (b"{not json", 400), (b"\x00\xff", 400),
                             (b"[1, 2]", 400), (nested(5000), 400), (nested(129), 400),
                             (json.dumps({"type": "event_callback", "event": "x"}).encode(),
                              400),
                             (json.dumps({"type": "event_callback", "event_id": 7,
                                          "event": {}}).encode(), 400)):
            assert await post(http, dev.events, body) == status, body[:40]
        # well-formed but unusable: answered 200 (Slack would retry anything else), ignored
        for event in ({"type": "message", "channel": DM, "user": ["U1"], "text": "x",
                       "ts": "1.1"},
                      {"type": "message", "channel": "D1:2", "user": FRIEND, "text": "x",
                       "ts": "1700000041.000100", "channel_type": "im"},
                      {"type": "message", "channel": DM, "user": FRIEND, "text": {"a": 1},
                       "ts": "1700000042.000100", "channel_type": "im"},
                      {"type": "message", "subtype": "message_changed", "channel": DM,
                       "message": {"text": "edited"}, "ts": "1700000043.000100"}):
            assert await post(http, dev.events, callback(event)) == 200
        for body, status in ((b"payload=%7Bnot", 400), (b"payload=" + b"%5B" * 200, 400),
                             (b"\xff\xfe", 400), (b"payload=%5B1%5D", 400),
                             (press_form({"type": "block_actions", "actions": "x"}), 200)):
            assert await post(http, dev.interactivity, body) == status, body[:40]
        assert await post(http, dev.events.replace("/bot/", "/nobody/"), raw) == 404
        # the URL verification echoes a well-formed challenge only
        async with http.post(dev.events, data=(verify := json.dumps(
                {"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3"
                                                          "gmdALWMmHkvFXO7tYXAYM8P",
                 "token": "x"}).encode()), headers=signed_headers(verify)) as response:
            assert response.status == 200
            assert (await response.json())["challenge"].startswith("3eZbrw1aBm2")
        hostile = json.dumps({"type": "url_verification",
                              "challenge": "<script>alert(1)</script>"}).encode()
        assert await post(http, dev.events, hostile) == 400
        assert rows(database_url, "SELECT count(*) FROM toren_control.channel_updates"
                    ) == [(0,)]
        # NUL and a lone surrogate in the text: stored cleaned, answered; then the real one
        assert await post(http, dev.events, dm("bad \x00 byte \ud800", "1700000044.000100")
                          ) == 200
        assert await post(http, dev.events, raw) == 200
        await until(lambda: len(fake_slack.texts(DM)) == 2)
        async with http.get(f"{dev.url}/healthz") as response:
            assert response.status == 200
    assert fake_slack.texts(DM) == ["You said: bad \ufffd byte \ufffd",
                                    "You said: the real one"]


async def test_a_revoked_bot_token_stops_startup_naming_the_agent(
        fake_slack: FakeSlack, slack_agent: Callable[..., Path],
        slack_dev: Callable[..., Dev]) -> None:
    with pytest.raises(AssertionError) as caught:
        slack_dev(slack_agent(), TEST_SLACK_BOT_TOKEN="xoxb-revoked-token")
    message = str(caught.value)
    assert "exited with 1" in message
    assert "slack channel of agent bot cannot start" in message
    assert "invalid_auth" in message and "xoxb-revoked-token" not in message
