"""Fixtures: the fake Bot API, and an agent served over the telegram channel against it."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_telegram import TOKEN, FakeTelegram
from telegram_support import telegram_settings

from toren.host.runtime import Runtime
from toren.testing import write_agent_dir


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    fake = FakeTelegram().start()
    yield fake
    fake.stop()


@pytest.fixture
async def telegram_agent(fake_telegram: FakeTelegram,
                         toren_runtime: Callable[..., Awaitable[Runtime]],
                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                         ) -> Callable[..., Awaitable[Runtime]]:
    """``await telegram_agent(**settings)`` -> a started runtime serving agent ``bot`` over
    the telegram channel (its channels started), pointed at the fake Bot API;
    ``runtime_settings`` overrides the runtime's ``Settings`` (``max_file_bytes``)."""
    monkeypatch.setenv("TEST_TG_TOKEN", TOKEN)
    started: list[Runtime] = []

    async def make(*, runtime_settings: dict[str, Any] | None = None,
                   **settings: Any) -> Runtime:
        directory = write_agent_dir(tmp_path / "agents", "bot",
                                    channels={"telegram": telegram_settings(fake_telegram,
                                                                            **settings)})
        runtime = await toren_runtime([directory], load_plugins=("toren-telegram",),
                                      **(runtime_settings or {}))
        await runtime.start_channels()
        started.append(runtime)
        return runtime

    yield make  # type: ignore[misc]
    for runtime in started:
        await runtime.stop_channels()
