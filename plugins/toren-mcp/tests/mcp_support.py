"""Helpers of toren-mcp's tests: plans for the offline model, and reading a run's events."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from toren.host.runtime import Runtime

#: A fixture's factory of started runtimes serving agents with MCP servers (conftest.py).
AgentFactory = Callable[..., Awaitable[Runtime]]

FAKE_SERVER = Path(__file__).parent / "fake_mcp_server.py"


def plan(*calls: tuple[str, dict[str, Any]]) -> str:
    """An input that makes the offline model call exactly these tools, in order."""
    return json.dumps({"toolCalls": [{"name": name, "arguments": arguments}
                                     for name, arguments in calls]})


async def run_plan(runtime: Runtime, agent: str, *calls: tuple[str, dict[str, Any]],
                   status: str = "completed") -> tuple[str, list[Any]]:
    """Run ``agent`` on a plan of tool calls; ``(run id, its events' data by type)``."""
    run_id = await runtime.start_run(agent, plan(*calls))
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == status, record
    return run_id, [(event.type, event.data) for event in await runtime.events(run_id)]


def of_type(events: list[Any], kind: str) -> list[dict[str, Any]]:
    return [data for event_type, data in events if event_type == kind]


async def until(probe: Callable[[], Awaitable[Any]], within: float = 30.0) -> Any:
    """Await ``probe()`` until it returns something true (returned), for at most ``within``
    seconds."""
    deadline = time.monotonic() + within
    while True:
        found = await probe()
        if found or time.monotonic() > deadline:
            assert found, f"nothing within {within} s"
            return found
        await asyncio.sleep(0.05)
