"""``toren worker``: pollers only (no HTTP), for the agents in the directories."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from toren.cli.common import DirsOption, load_runtime, refresh_secrets_on_sighup
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json, safe
from toren.host.runtime import Runtime


def worker(
    dirs: DirsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Work queued runs of the agents in the directories until SIGINT/SIGTERM."""
    runtime = load_runtime(dirs)
    asyncio.run(_work(runtime, as_json))


async def _work(runtime: Runtime, as_json: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    refresh_secrets_on_sighup(runtime)
    await runtime.start(workers=True)
    try:
        info = runtime.describe()
        if as_json:
            print_json({"event": "ready"} | info)
        else:
            console.print(f"[bold]Toren worker[/] · {safe(info['workers'])}")
            console.print(f"  database: {safe(info['database'])}")
            console.print(f"  agents:   {safe(', '.join(runtime.agents))}")
        await stop.wait()
        if not as_json:
            err_console.print("Stopping: finishing work in hand…")
    finally:
        await runtime.stop()
