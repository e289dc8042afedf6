"""Toren's pytest fixtures (the ``pytest11`` entry point ``toren``): loaded in any pytest run
where toren is installed, so plugin authors get them without a conftest.

- ``scripted_model``: a fresh ``toren.testing.ScriptedModel``.
- ``make_agent_dir``: writes an agent directory under the test's ``tmp_path``.
- ``output_processes``: a list to append ``toren.testing.OutputProcess`` objects to; each is
  stopped at teardown (crash tests that start workers and fake servers).
- ``toren_runtime``: ``await toren_runtime([agent_dir], load_plugins=("toren-sql",))`` -> a
  started ``toren.Runtime`` with workers on this test's database (needs toren-postgres's
  ``database_url`` fixture), stopped at teardown; for tool plugins' end-to-end tests.

They live apart from ``toren.testing`` so that module imports without pytest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from toren.config import Settings
from toren.host.runtime import Runtime
from toren.testing import OutputProcess, ScriptedModel, write_agent_dir


@pytest.fixture
def scripted_model() -> ScriptedModel:
    """A fresh offline model; inspect ``.calls`` after the code under test ran."""
    return ScriptedModel()


@pytest.fixture
def make_agent_dir(tmp_path: Path) -> Callable[..., Path]:
    """``make_agent_dir(name, **fields)`` -> a new agent directory under ``tmp_path``."""

    def make(name: str = "test-agent", **kwargs: Any) -> Path:
        return write_agent_dir(tmp_path, name, **kwargs)

    return make


@pytest.fixture
async def toren_runtime(database_url: str, tmp_path: Path
                        ) -> AsyncIterator[Callable[..., Awaitable[Runtime]]]:
    """``await toren_runtime([agent_dir], load_plugins=(...), **settings)`` -> a started
    ``Runtime`` (workers on, fast leases and polls) on this test's database."""
    made: list[Runtime] = []

    async def make(dirs: Sequence[Path], *, load_plugins: tuple[str, ...] = (),
                   **overrides: Any) -> Runtime:
        settings = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "toren-home",
                     load_plugins=load_plugins),
            **({"lease_ttl_s": 1.0, "poll_interval_s": 0.2} | overrides))
        runtime = Runtime(list(dirs), settings=settings)
        made.append(runtime)
        await runtime.start()
        return runtime

    yield make
    for runtime in reversed(made):
        await runtime.stop()


@pytest.fixture
def output_processes() -> Iterator[list[OutputProcess]]:
    """Append each ``OutputProcess`` a test starts; those still running are stopped at
    teardown."""
    started: list[OutputProcess] = []
    yield started
    for process in started:
        process.stop()
