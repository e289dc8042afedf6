"""Fixtures: agents whose tools come from MCP servers (``mcpServers:``), served by a started
runtime on this test's database that loads toren-mcp."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mcp_support import FAKE_SERVER, AgentFactory

from toren.host.runtime import Runtime
from toren.testing import write_agent_dir


@pytest.fixture
def fake_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the fake server's ``record`` tool appends each call to."""
    path = tmp_path / "fake-calls.log"
    path.touch()
    monkeypatch.setenv("FAKE_MCP_LOG", str(path))
    return path


@pytest.fixture
def fake_server(fake_log: Path) -> dict[str, Any]:
    """An ``mcpServers:`` entry for the fake server (over stdio)."""
    return {"command": sys.executable, "args": [str(FAKE_SERVER)],
            "env": {"FAKE_MCP_LOG": "${FAKE_MCP_LOG}"}}


@pytest.fixture
async def mcp_agent(toren_runtime: Callable[..., Awaitable[Runtime]], tmp_path: Path
                    ) -> AgentFactory:
    """``await mcp_agent(mcpServers={...}, **agent_yaml)`` -> a started runtime (workers on)
    serving agent ``reacher`` on the offline model, with toren-mcp loaded."""

    async def make(name: str = "reacher", **yaml_fields: Any) -> Runtime:
        directory = write_agent_dir(tmp_path / "agents", name, **yaml_fields)
        return await toren_runtime([directory], load_plugins=("toren-mcp",),
                                   guardian_interval_s=0.5, shutdown_grace_s=2.0)

    return make
