"""``toren top``: a live view of the fleet (workers, queue, runs in flight, recent failures)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from toren.cli.common import run_async
from toren.cli.operator import UrlOption, make_operator, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, safe


def top(
    interval: Annotated[float, typer.Option(
        "--interval", metavar="SECONDS", min=0.2, max=3600, envvar="TOREN_TOP_INTERVAL",
        help="Seconds between refreshes.")] = 2.0,
    as_json: Annotated[bool, typer.Option(
        "--json", help=JSON_OPTION_HELP + " One snapshot, then exit.")] = False,
    url: UrlOption = None,
) -> None:
    """Watch the fleet live: workers and their versions, each agent's queue (ready, in
    flight, oldest wait) and unfinished runs, the runs in flight with their current step and
    elapsed time, and the latest failures. Ctrl-C ends it."""
    if as_json:
        print_json(operate(lambda op: op.fleet(), url=url))
        return
    operator = make_operator(url)

    async def watch() -> None:
        await operator.start()
        try:
            with Live(console=console, auto_refresh=False, screen=False) as live:
                while True:
                    live.update(render(await operator.fleet()), refresh=True)
                    await asyncio.sleep(interval)
        finally:
            await operator.aclose()

    with contextlib.suppress(KeyboardInterrupt):
        run_async(watch())


def render(snapshot: dict[str, Any]) -> Group:
    """The snapshot as four tables."""
    now = datetime.fromisoformat(snapshot["at"])
    workers = Table(title=f"workers ({', '.join(snapshot['versions']) or 'none live'})",
                    title_justify="left")
    for column in ("worker", "version", "agents", "heartbeat"):
        workers.add_column(column)
    for worker in snapshot["workers"]:
        workers.add_row(safe(worker["id"]), safe(worker["version"]),
                        safe(", ".join(worker["agents"])),
                        f"{_age(now, worker['last_heartbeat'])} ago")
    queue = Table(title="agents", title_justify="left")
    for column in ("agent", "ready", "in flight", "delayed", "oldest wait", "dead letters",
                   "unfinished runs"):
        queue.add_column(column)
    for agent, info in snapshot["agents"].items():
        depth = info["queue"] or {}
        runs = ", ".join(f"{status} {count}" for status, count in sorted(info["runs"].items()))
        queue.add_row(safe(agent), str(depth.get("ready", 0)), str(depth.get("in_flight", 0)),
                      str(depth.get("delayed", 0)),
                      _seconds(depth.get("oldest_ready_age_s", 0.0)),
                      str(info["dead_letters"]), runs or "-")
    runs_table = Table(title="runs in flight (oldest first)", title_justify="left")
    for column in ("run", "agent", "status", "step", "tasks", "elapsed", "latest error"):
        runs_table.add_column(column)
    for run in snapshot["runs_in_flight"]:
        error = run["error"] or {}
        runs_table.add_row(safe(run["id"][:8]), safe(run["agent"]), run["status"],
                           str(run["step"]), str(run["tasks"]), f"{run['elapsed_s']:.0f}s",
                           safe(str(error.get("message", ""))[:60]))
    failures = Table(title="recent failures", title_justify="left")
    for column in ("run", "agent", "reason", "error", "finished"):
        failures.add_column(column)
    for run in snapshot["recent_failures"]:
        error = run["error"] or {}
        failures.add_row(safe(run["id"][:8]), safe(run["agent"]), safe(run["stop_reason"] or ""),
                         safe(str(error.get("message", ""))[:60]),
                         f"{_age(now, run['finished_at'])} ago" if run["finished_at"] else "")
    return Group(workers, queue, runs_table, failures)


def _age(now: datetime, at: str) -> str:
    seconds = max((now - datetime.fromisoformat(at).astimezone(UTC)).total_seconds(), 0.0)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _seconds(value: float | None) -> str:
    """How long the oldest ready message waited; "-" when the queue cannot say (SQS)."""
    return "-" if value is None else f"{value:.1f}s"
