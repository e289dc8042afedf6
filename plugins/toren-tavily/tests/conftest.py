"""Fixtures: the fake Tavily API, and the plugin's settings pointed at it with fast retries."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_tavily import TEST_KEY, FakeFactory, FakeTavily


@pytest.fixture
async def fake_tavily(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeFactory]:
    """``await fake_tavily(["429", "ok"])`` -> a started fake that the plugin talks to."""
    started: list[FakeTavily] = []

    async def make(script: Sequence[str | int] = (), **kwargs: str) -> FakeTavily:
        fake = await FakeTavily(script, **kwargs).start()
        started.append(fake)
        monkeypatch.setenv("TOREN_TAVILY_BASE_URL", fake.url)
        return fake

    monkeypatch.setenv("TAVILY_API_KEY", TEST_KEY)
    monkeypatch.setenv("TOREN_TAVILY_RETRY_BASE", "0.05")
    monkeypatch.setenv("TOREN_TAVILY_TIMEOUT", "1")
    for name in ("TAVILY_PROJECT", "TAVILY_ORG_ID", "TAVILY_HTTP_PROXY", "TAVILY_HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield make
    for fake in started:
        await fake.stop()
