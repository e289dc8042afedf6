"""Helpers of the sandbox's tests: plans for the offline model, and running them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from toren.host.runtime import Runtime

FAST = {"lease_ttl_s": 1.0, "poll_interval_s": 0.2, "guardian_interval_s": 0.5,
        "shutdown_grace_s": 2.0}
RuntimeFactory = Callable[..., Awaitable[tuple[Runtime, Path]]]


def plan(*calls: tuple[str, dict[str, Any]]) -> str:
    """An input that makes the offline model call exactly these tools, in order."""
    return json.dumps({"toolCalls": [{"name": name, "arguments": arguments}
                                     for name, arguments in calls]})


async def run_plan(runtime: Runtime, *calls: tuple[str, dict[str, Any]]) -> tuple[str, list[Any]]:
    """Run the agent ``boxed`` on a plan of tool calls; ``(run id, tool results)``."""
    run_id = await runtime.start_run("boxed", plan(*calls))
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record
    results = [event.data for event in await runtime.events(run_id)
               if event.type == "ToolCallCompleted"]
    return run_id, results
