"""Fixtures for toren-openai's tests: the fake server, a clean OpenAI environment, runtimes."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The fake server is a plain module next to the tests, also run as a script by the crash test.
sys.path.insert(0, os.path.dirname(__file__))

from fake_openai import FakeOpenAI
from toren_openai.model import OpenAIModel
from toren_openai.provider import OpenAIProvider

from toren.config import Settings
from toren.host.runtime import Runtime

#: Fast timings so retries and lease expiry take fractions of a second.
FAST = {"lease_ttl_s": 1.0, "retry_base_s": 0.05, "retry_max_delay_s": 0.2,
        "poll_interval_s": 0.2, "guardian_interval_s": 0.5, "shutdown_grace_s": 2.0}

#: Variables the SDK or this plugin read; a developer's settings must not leak into tests.
OPENAI_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
               "OPENAI_ADMIN_KEY", "OPENAI_CUSTOM_HEADERS", "TOREN_OPENAI_TIMEOUT",
               "TOREN_SKIP_PREFLIGHT")


@pytest.fixture(autouse=True)
def clean_openai_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in OPENAI_VARS:
        monkeypatch.delenv(name, raising=False)
    yield


@pytest.fixture
async def make_fake() -> AsyncIterator[Callable[..., Any]]:
    """``await make_fake(script, **options)`` -> a started ``FakeOpenAI`` (stopped after)."""
    fakes: list[FakeOpenAI] = []

    async def make(*args: Any, **kwargs: Any) -> FakeOpenAI:
        fake = FakeOpenAI(*args, **kwargs)
        await fake.start()
        fakes.append(fake)
        return fake

    yield make
    for fake in fakes:
        await fake.stop()


async def close_models(runtime: Runtime) -> None:
    """Close the HTTP clients of the runtime's OpenAI models (the kernel does not yet)."""
    for agent in runtime.agents.values():
        for model_id in agent.model_ids:
            for base_url in {agent.base_url, None}:
                model = runtime.model(model_id, base_url=base_url)
                aclose = getattr(model, "aclose", None)
                if aclose is not None:
                    await aclose()


@pytest.fixture
async def start_runtime(database_url: str, tmp_path: Path
                        ) -> AsyncIterator[Callable[..., Any]]:
    """``await start_runtime(agent_dir, workers=True, **settings)`` -> a started ``Runtime``
    on this test's database with only toren-openai loaded; stopped after the test."""
    started: list[Runtime] = []

    async def start(directory: Path, *, workers: bool = True, **overrides: Any) -> Runtime:
        settings = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "home",
                     load_plugins=("toren-openai",)),
            **(FAST | overrides))
        runtime = Runtime([directory], settings=settings)
        started.append(runtime)
        await runtime.start(workers=workers)
        return runtime

    yield start
    for runtime in reversed(started):
        await runtime.stop()
        await close_models(runtime)


@pytest.fixture
async def make_model() -> AsyncIterator[Callable[..., OpenAIModel]]:
    """``make_model(model_id, base_url)`` -> an ``OpenAIModel`` closed after the test."""
    made: list[OpenAIModel] = []

    def make(model_id: str = "openai/gpt-4o-mini", base_url: str | None = None) -> OpenAIModel:
        model = OpenAIProvider().get_model(model_id, base_url=base_url)
        assert isinstance(model, OpenAIModel)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()
