"""Helpers for durable-core tests: in-process runtimes on a per-test database, scripted
providers, and checks that every appended event is well-formed."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from toren import hookimpl
from toren.agents import AgentSpec
from toren.config import Settings
from toren.core.catalog import validate_event
from toren.core.events import Event
from toren.host.runtime import Runtime
from toren.seams.model import Model, ModelProvider
from toren.seams.plugins import PluginHost

#: Fast timings so crash and lease tests take seconds, not minutes.
FAST = {"lease_ttl_s": 1.0, "poll_interval_s": 0.2, "guardian_interval_s": 0.5,
        "retry_base_s": 0.05, "retry_max_delay_s": 0.2, "shutdown_grace_s": 2.0}


class ModelsPlugin:
    """A plugin object that registers one provider serving ``<prefix>/<name>`` models."""

    def __init__(self, prefix: str, models: dict[str, Model]) -> None:
        self.provider = _Provider(prefix, models)

    @hookimpl
    def register_models(self, register: Callable[[ModelProvider], None]) -> None:
        register(self.provider)


class _Provider(ModelProvider):
    description = "test models"

    def __init__(self, prefix: str, models: dict[str, Model]) -> None:
        self.prefix = prefix
        self.models = models

    def get_model(self, model_id: str) -> Model:
        model = self.models[model_id.partition("/")[2]]
        model.model_id = model_id
        return model


def plugin_host(models: dict[str, Model] | None = None, prefix: str = "test") -> PluginHost:
    """Built-in plugins only, plus ``models`` served under ``prefix/``."""
    host = PluginHost(load=())
    if models:
        host.add_plugin(ModelsPlugin(prefix, models), f"{prefix}-models")
    return host


def check_log(events: Sequence[Event]) -> dict[str, list[Event]]:
    """Every event matches the catalog; each stream's seqs are exactly 1..n. By stream."""
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        validate_event(event.stream, event.type, event.data)
        by_stream.setdefault(event.stream, []).append(event)
    for stream, items in by_stream.items():
        seqs = sorted(e.seq for e in items)
        assert seqs == list(range(1, len(seqs) + 1)), f"gaps or duplicates in {stream}: {seqs}"
    return by_stream


def types(events: Sequence[Event], stream: str = "task:main") -> list[str]:
    return [e.type for e in sorted(events, key=lambda e: e.seq) if e.stream == stream]


RuntimeFactory = Callable[..., Any]


@pytest.fixture
async def make_runtime(database_url: str, tmp_path: Path) -> AsyncIterator[RuntimeFactory]:
    """``await make_runtime(dirs=[...] | agents=[...], models={...}, workers=True, **settings)``
    -> a started ``Runtime`` on this test's database, stopped at teardown."""
    started: list[Runtime] = []

    async def make(*, dirs: Sequence[Path] | None = None,
                   agents: Sequence[AgentSpec] | None = None,
                   models: dict[str, Model] | None = None, workers: bool = True,
                   **overrides: Any) -> Runtime:
        settings = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "home", load_plugins=()),
            **(FAST | overrides))
        runtime = Runtime(dirs, settings=settings, plugins=plugin_host(models), agents=agents)
        await runtime.start(workers=workers)
        started.append(runtime)
        return runtime

    yield make
    for runtime in reversed(started):
        await runtime.stop()
