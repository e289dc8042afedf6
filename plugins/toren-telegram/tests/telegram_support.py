"""Helpers the telegram tests share (a module name of its own: pytest imports every
plugin's tests in one process, where two ``conftest`` modules would collide)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from fake_telegram import FakeTelegram

#: The user every test allow-lists.
FRIEND = 111


def telegram_settings(fake: FakeTelegram, **overrides: Any) -> dict[str, Any]:
    """The telegram channel's settings for agent ``bot``, pointed at ``fake``."""
    return {"bot_token_env": "TEST_TG_TOKEN", "api_url": fake.url, "allow_from": [FRIEND],
            "poll_timeout_s": 1} | overrides


async def until(predicate: Callable[[], object], within: float = 20.0) -> None:
    """Wait until ``predicate()`` is true; fail the test after ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    assert predicate(), "timed out"
