"""web_search with the real tavily-python client against the local fake Tavily API."""

from __future__ import annotations

import json
import time

import pytest
from fake_tavily import TEST_KEY, FakeFactory
from toren_tavily.plugin import web_search

from toren.errors import ToolError
from toren.testing import tool_call


async def search(query: str = "durable agents", **kwargs: object) -> dict[str, object]:
    with tool_call():
        result: dict[str, object] = json.loads(await web_search(query, **kwargs))  # type: ignore[arg-type]
        return result


async def test_results_are_title_url_content_and_score(fake_tavily: FakeFactory) -> None:
    fake = await fake_tavily()
    result = await search("event sourcing", max_results=2, topic="news")
    assert result["results"] == [
        {"title": "event sourcing - result 1", "url": "https://example.com/1",
         "content": "What page 1 says about event sourcing.", "score": 0.9},
        {"title": "event sourcing - result 2", "url": "https://example.com/2",
         "content": "What page 2 says about event sourcing.", "score": 0.8}]
    (body,) = fake.requests
    assert (body["query"], body["max_results"], body["topic"]) == ("event sourcing", 2, "news")


async def test_a_refused_key_fails_at_once_naming_the_variable(
        fake_tavily: FakeFactory) -> None:
    fake = await fake_tavily(api_key="another-key")
    with pytest.raises(ToolError, match=r"refused the API key in TAVILY_API_KEY \(401\)"):
        await search()
    assert len(fake.requests) == 1  # not retried


async def test_429_is_retried_with_backoff_then_succeeds(fake_tavily: FakeFactory) -> None:
    fake = await fake_tavily([429, 429])
    started = time.monotonic()
    result = await search()
    assert len(result["results"]) == 3  # type: ignore[arg-type]
    assert len(fake.requests) == 3
    assert time.monotonic() - started >= 0.05  # backed off: 0.025-0.05 s, then 0.05-0.1 s


async def test_429_every_time_gives_up_after_the_attempts(
        fake_tavily: FakeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_TAVILY_ATTEMPTS", "3")
    fake = await fake_tavily([429] * 10)
    with pytest.raises(ToolError, match=r"rate limiting .*\(429\).* \(after 3 attempts\)"):
        await search()
    assert len(fake.requests) == 3


async def test_a_server_that_hangs_times_out_and_is_retried(fake_tavily: FakeFactory) -> None:
    fake = await fake_tavily(["hang"])
    result = await search()
    assert len(result["results"]) == 3  # type: ignore[arg-type]
    assert len(fake.requests) == 2


async def test_timeouts_every_time_are_a_clear_error(
        fake_tavily: FakeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_TAVILY_ATTEMPTS", "2")
    await fake_tavily(["hang", "hang"])
    with pytest.raises(ToolError, match=r"did not answer within 1 s \(TOREN_TAVILY_TIMEOUT\) "
                                        r"\(after 2 attempts\)"):
        await search()


async def test_a_server_error_is_retried_and_a_bad_request_is_not(
        fake_tavily: FakeFactory) -> None:
    fake = await fake_tavily([500, 400])
    with pytest.raises(ToolError, match=r"rejected the search as invalid \(400\)"):
        await search()
    assert len(fake.requests) == 2


async def test_an_unreachable_server_is_a_tool_error(
        monkeypatch: pytest.MonkeyPatch, fake_tavily: FakeFactory) -> None:
    monkeypatch.setenv("TOREN_TAVILY_BASE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("TOREN_TAVILY_ATTEMPTS", "2")
    with pytest.raises(ToolError, match="cannot reach Tavily"):
        await search()


async def test_an_agent_may_read_its_own_key_variable(
        fake_tavily: FakeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    await fake_tavily()
    monkeypatch.setenv("TAVILY_API_KEY", "the-shared-key-is-wrong")
    monkeypatch.setenv("RESEARCH_TAVILY_KEY", TEST_KEY)
    with tool_call(env_names={"TAVILY_API_KEY": "RESEARCH_TAVILY_KEY"}):
        assert json.loads(await web_search("x"))["results"]
