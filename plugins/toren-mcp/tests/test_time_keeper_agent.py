"""The example agent contrib/examples/tool-plugins/time-keeper, as its README runs it: the real
``mcp-server-time`` (its console script, found on PATH) as the agent's MCP server."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from mcp_support import of_type, run_plan

from toren.host.runtime import Runtime

EXAMPLE = Path(__file__).parents[3] / "contrib" / "examples" / "tool-plugins" / "time-keeper"


async def test_the_time_keeper_example_reads_and_converts_clocks(
        toren_runtime: Callable[..., Awaitable[Runtime]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the console scripts of this environment, as an activated virtual environment has them
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    runtime = await toren_runtime([EXAMPLE], load_plugins=("toren-mcp",))
    _run_id, events = await run_plan(
        runtime, "time-keeper", ("time__get_current_time", {"timezone": "Asia/Tokyo"}),
        ("time__convert_time", {"source_timezone": "UTC", "time": "09:30",
                                "target_timezone": "Asia/Tokyo"}))
    now, converted = of_type(events, "ToolCallCompleted")
    assert not now["is_error"] and '"timezone": "Asia/Tokyo"' in now["output"]
    assert not converted["is_error"] and "18:30" in converted["output"]  # no DST in either
    [started] = of_type(events, "ToolCallStarted")[:1]
    assert started["name"] == "time__get_current_time"
