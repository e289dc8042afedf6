"""Web API errors as the channel sees them: slack_sdk's client against the fake Slack over
real HTTP, each answer sorted into retryable (with Retry-After) or permanent."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from fake_slack import BOT_TOKEN, FakeSlack
from toren_slack.api import call, web_client

from toren.plugin import ChannelError


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(("status", "error", "retry_after", "retryable", "expected_after"), [
    (429, "ratelimited", "7", True, 7.0),
    (200, "ratelimited", None, True, None),   # ok: false with HTTP 200
    (503, "", None, True, None),              # a bare 5xx, not JSON
    (500, "internal_error", None, True, None),
    (200, "channel_not_found", None, False, None),
    (200, "not_in_channel", None, False, None),
    (200, "is_archived", None, False, None),
    (429, "ratelimited", "soon", True, None),  # a Retry-After that is no number: ignored
])
async def test_answers_are_sorted_into_retryable_and_permanent(
        fake_slack: FakeSlack, status: int, error: str, retry_after: str | None,
        retryable: bool, expected_after: float | None) -> None:
    fake_slack.fail("C0ANY0001", status, error, retry_after=retry_after)
    async with aiohttp.ClientSession() as session:
        client = web_client(session, BOT_TOKEN, fake_slack.url)
        with pytest.raises(ChannelError) as caught:
            await call(client, "chat.postMessage", channel="C0ANY0001", text="hi")
        assert (caught.value.retryable, caught.value.retry_after_s) == (retryable,
                                                                        expected_after)
        assert caught.value.status == status
        assert f"answered {status}" in caught.value.message
        assert (error or "no error code") in caught.value.message
        answer = await call(client, "chat.postMessage", channel="C0ANY0001", text="hi")
    assert answer["ok"] is True and fake_slack.texts("C0ANY0001") == ["hi"]


async def test_a_wrong_token_is_permanent_and_never_shown(fake_slack: FakeSlack) -> None:
    async with aiohttp.ClientSession() as session:
        client = web_client(session, "xoxb-wrong-secret", fake_slack.url)
        with pytest.raises(ChannelError) as caught:
            await call(client, "auth.test")
    assert not caught.value.retryable and "invalid_auth" in caught.value.message
    assert "xoxb-wrong-secret" not in caught.value.message


async def test_an_unreachable_slack_is_retryable() -> None:
    async with aiohttp.ClientSession() as session:
        client = web_client(session, BOT_TOKEN, f"http://127.0.0.1:{free_port()}/api/")
        with pytest.raises(ChannelError) as caught:
            await call(client, "chat.postMessage", channel="C1", text="hi")
    assert caught.value.retryable and "network" in caught.value.message
