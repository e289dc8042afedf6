"""Fixtures: a Toren runtime on this test's database that loads only this plugin, and tool calls
made the way the task loop makes them."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sandbox_helpers import FAST, RuntimeFactory

from toren.config import Settings
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir


@pytest.fixture
def workspaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's TOREN_SANDBOX_DIR (the worker's disk)."""
    root = tmp_path / "workspaces"
    monkeypatch.setenv("TOREN_SANDBOX_DIR", str(root))
    return root


@pytest.fixture
async def sandbox_runtime(database_url: str, tmp_path: Path, workspaces: Path
                          ) -> AsyncIterator[RuntimeFactory]:
    """``await sandbox_runtime(sandbox={...}, tools=[...])`` -> ``(runtime, agent directory)``:
    an agent on the offline model with the sandbox's tools, served by a started runtime
    (``settings={...}``: other values of its ``Settings``)."""
    started: list[Runtime] = []

    async def make(*, tools: list[str] | None = None, settings: dict[str, Any] | None = None,
                   **yaml_fields: Any) -> tuple[Runtime, Path]:
        directory = write_agent_dir(tmp_path / "agents", "boxed", tools=tools or ["sandbox"],
                                    **yaml_fields)
        configured = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "home",
                     load_plugins=("toren-sandbox",)), **FAST | (settings or {}))
        runtime = Runtime([directory], settings=configured)
        await runtime.start()
        started.append(runtime)
        return runtime, directory

    yield make
    for runtime in reversed(started):
        await runtime.stop()
