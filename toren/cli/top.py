"""``toren top``: a live view of the fleet (workers, queue, runs in flight, recent failures)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

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
    """The snapshot as four tables, a line per agent whose waiting work no live worker
    serves, and a table of provider rate limits when any are used."""
    now = datetime.fromisoformat(snapshot["at"])
    workers = Table(title=f"workers ({', '.join(snapshot['versions']) or 'none live'})",
                    title_justify="left")
    for column in ("worker", "version", "lane", "supervisor", "agents", "heartbeat"):
        workers.add_column(column)
    for worker in snapshot["workers"]:
        # the workers of one supervisor (toren worker --processes N) share its id
        workers.add_row(safe(worker["id"]), safe(worker["version"]),
                        safe(worker.get("lane") or "all"), safe(worker.get("supervisor") or "-"),
                        safe(", ".join(worker["agents"])),
                        f"{_age(now, worker['last_heartbeat'])} ago")
    queue = Table(title="agents", title_justify="left")
    for column in ("agent", "ready", "in flight", "delayed", "oldest wait", "dead letters",
                   "unfinished runs", "lane", "workers", "waiting for a slot"):
        queue.add_column(column)
    for agent, info in snapshot["agents"].items():
        depth = info["queue"] or {}
        runs = ", ".join(f"{status} {count}" for status, count in sorted(info["runs"].items()))
        queue.add_row(safe(agent), str(depth.get("ready", 0)), str(depth.get("in_flight", 0)),
                      str(depth.get("delayed", 0)),
                      _seconds(depth.get("oldest_ready_age_s", 0.0)),
                      str(info["dead_letters"]), runs or "-", safe(info.get("lane") or "-"),
                      str(info.get("served_by", "-")),
                      # ready messages held back by the agent's concurrency: limit
                      str((depth.get("waiting") or {}).get("concurrency", 0)))
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
    # work that no live worker serves (a long agent with no --lane long worker): said aloud
    unserved = [Text.from_markup(f"[bold red]! {safe(entry['message'])}[/]")
                for entry in snapshot.get("unserved", [])]
    tables: list[RenderableType] = [workers, queue, *unserved, runs_table, failures]
    if snapshot.get("rate_limits"):
        tables.append(rate_limits_table(snapshot["rate_limits"], now))
    return Group(*tables)


def rate_limits_table(buckets: list[dict[str, Any]], now: datetime) -> Table:
    """Each provider rate-limit bucket: used of its limit in the window, per dimension, calls
    in flight and waiting, and the pause a provider's 429 set."""
    table = Table(title="provider rate limits (per window)", title_justify="left")
    for column in ("bucket", "window", "requests", "input tokens", "output tokens", "in flight",
                   "waiting", "paused", "waits"):
        table.add_column(column)
    for bucket in buckets:
        used, limits = bucket["used"], bucket["limits"]

        def share(kind: str, used: dict[str, Any] = used, limits: dict[str, Any] = limits
                  ) -> str:
            limit = limits.get(kind)
            return f"{used.get(kind, 0):,}" + ("" if limit is None else f"/{limit:,}")

        paused = bucket.get("paused_until")
        left = ((datetime.fromisoformat(paused) - now).total_seconds() if paused else 0.0)
        table.add_row(safe(bucket["name"]), f"{bucket['window_s']:g}s", share("requests"),
                      share("input_tokens"), share("output_tokens"), str(bucket["held"]),
                      str(bucket["waiting"]), f"{max(left, 0.0):.0f}s" if paused else "-",
                      f"{bucket['waits_total']} ({bucket['wait_seconds_total']:.0f}s)")
    return table


def _age(now: datetime, at: str) -> str:
    seconds = max((now - datetime.fromisoformat(at).astimezone(UTC)).total_seconds(), 0.0)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _seconds(value: float | None) -> str:
    """How long the oldest ready message waited; "-" when the queue cannot say (SQS)."""
    return "-" if value is None else f"{value:.1f}s"
