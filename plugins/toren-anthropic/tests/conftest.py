"""Fixtures: the fake Messages API (``fake_anthropic.py``, importable from the tests) and a
Toren runtime on this test's database that loads only this plugin."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_anthropic import TEST_KEY, FakeAnthropic, FakeFactory

from toren.config import Settings
from toren.host.runtime import Runtime

#: Variables that would let a developer's own setup leak into what the SDK does.
_SDK_ENV = ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE",
            "ANTHROPIC_CONFIG_DIR", "ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_IDENTITY_TOKEN",
            "ANTHROPIC_IDENTITY_TOKEN_FILE", "ANTHROPIC_FEDERATION_RULE_ID",
            "ANTHROPIC_ORGANIZATION_ID", "TOREN_ANTHROPIC_TIMEOUT")


@pytest.fixture(autouse=True)
def anthropic_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A known key, and no ambient SDK configuration."""
    for name in _SDK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-anthropic-config"))
    yield


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeFactory]:
    """``await fake_anthropic(script=[...], responder=..., delay=..., api_key=...)`` -> a
    running ``FakeAnthropic``, stopped at teardown."""
    started: list[FakeAnthropic] = []

    async def make(script: Sequence[Any] = (), **kwargs: Any) -> FakeAnthropic:
        fake = await FakeAnthropic(script, **kwargs).start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        await fake.stop()


@pytest.fixture
async def anthropic_runtime(database_url: str, tmp_path: Path
                            ) -> AsyncIterator[Callable[..., Coroutine[Any, Any, Runtime]]]:
    """``await anthropic_runtime([agent_dir], workers=True, skip_preflight=False)`` -> a
    started ``Runtime`` loading only toren-anthropic, with fast leases and retries."""
    made: list[Runtime] = []

    async def make(dirs: Sequence[Path], *, workers: bool = True, start: bool = True,
                   **overrides: Any) -> Runtime:
        settings = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "toren-home",
                     load_plugins=("toren-anthropic",)),
            **({"lease_ttl_s": 1.0, "retry_base_s": 0.05, "retry_max_delay_s": 0.2,
                "poll_interval_s": 0.2} | overrides))
        runtime = Runtime(list(dirs), settings=settings)
        made.append(runtime)
        if start:
            await runtime.start(workers=workers)
        return runtime

    yield make
    for runtime in reversed(made):
        await runtime.stop()
        for agent in runtime.agents.values():
            for model_id in agent.model_ids:
                model = runtime.model(model_id, base_url=agent.base_url)
                close = getattr(model, "aclose", None)
                if close is not None:
                    await close()
