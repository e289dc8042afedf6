"""``toren worker``: pollers only (no HTTP), for the agents in the directories; with
``--processes N``, a supervisor of N such worker processes (``toren.host.supervisor``)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toren.cli.common import DirsOption, load_runtime, refresh_secrets_on_sighup, served_dirs
from toren.cli.output import JSON_OPTION_HELP, console, err_console, print_json, safe
from toren.config import worker_lane, worker_processes
from toren.host import event_loop
from toren.host.supervisor import Supervisor, child_command

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

#: ``--processes``'s help, shared with ``toren serve --workers``.
PROCESSES_HELP = ("Worker processes to run on this machine: a number, or auto (one per CPU "
                  "available, the container's CPU quota included). With more than 1, this "
                  "process supervises them: it restarts one that dies and drains them all on "
                  "SIGTERM (env var TOREN_PROCESSES; default 1, the worker runs in this process)")
#: Seconds between a supervised worker's looks at whether its supervisor is still there.
ORPHAN_CHECK_S = 1.0


def worker(
    dirs: DirsOption = None,
    lane: Annotated[str | None, typer.Option(
        "--lane", metavar="short|long|all",
        help="Which agents to work: short (those without runtime: long), long (those with "
             "it: hours-long runs get their own pool) or all (env var TOREN_LANE; "
             "default all)")] = None,
    processes: Annotated[str | None, typer.Option(
        "--processes", metavar="N|auto", help=PROCESSES_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Work queued runs of the agents in the directories until SIGINT/SIGTERM."""
    count = None if processes is None else worker_processes(processes, "--processes")
    runtime = load_runtime(dirs, lane=None if lane is None else worker_lane(lane, "--lane"))
    count = runtime.settings.processes if count is None else count
    if count == 1:
        event_loop.run(_work(runtime, as_json))
        return
    clean = event_loop.run(supervise(runtime, served_dirs(dirs), count, as_json))
    if not clean:
        raise typer.Exit(1)


async def _work(runtime: Runtime, as_json: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    refresh_secrets_on_sighup(runtime)
    lane, served = runtime.settings.lane, runtime.lane_agents
    if not served:
        # not an error: a long-lane pool may run before any agent moves to runtime: long
        err_console.print(f"[yellow]No agent of lane {lane} in these directories: this "
                          f"worker will claim nothing (agents: "
                          f"{safe(', '.join(runtime.agents)) or 'none'}; an agent's lane is "
                          "its runtime: in agent.yaml).[/]")
    await runtime.start(workers=True)
    orphan_guard = (asyncio.create_task(_stop_when_orphaned(stop), name="toren-orphan-guard")
                    if runtime.settings.supervisor else None)
    try:
        info = runtime.describe()
        if as_json:
            print_json({"event": "ready"} | info | {
                "lane_agents": served, "worker": worker_id(runtime), "pid": os.getpid(),
                "supervisor": runtime.settings.supervisor})
        else:
            console.print(f"[bold]Toren worker[/] · {safe(info['workers'])}")
            console.print(f"  database: {safe(info['database'])}")
            console.print(f"  lane:     {lane}")
            console.print(f"  agents:   {safe(', '.join(served)) or 'none'}")
        await stop.wait()
        if not as_json:
            err_console.print("Stopping: finishing work in hand…")
    finally:
        if orphan_guard is not None:
            orphan_guard.cancel()
        await runtime.stop()


def worker_id(runtime: Runtime) -> str | None:
    """The id this process's worker signed in with (``None`` before it started)."""
    found = getattr(runtime.workers, "worker", None)
    return getattr(found, "id", None)


async def _stop_when_orphaned(stop: asyncio.Event) -> None:
    """A supervised worker whose supervisor is gone (killed outright) drains and exits, as
    on SIGTERM, rather than working on unsupervised."""
    parent = os.getppid()
    while not stop.is_set():
        await asyncio.sleep(ORPHAN_CHECK_S)
        if os.getppid() != parent:
            err_console.print("[yellow]The supervisor of this worker process is gone: "
                              "stopping.[/]")
            stop.set()


async def supervise(runtime: Runtime, dirs: list[Path], processes: int,
                    as_json: bool) -> bool:
    """Run ``processes`` worker processes on the directories and lane of ``runtime`` (loaded,
    so the agents are valid, never started) until SIGINT/SIGTERM, then drain them; whether
    every one stopped cleanly within the grace (``Supervisor.stop``)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    output = SupervisorOutput(as_json)
    supervisor = Supervisor(child_command([str(d) for d in dirs], lane=runtime.settings.lane),
                            processes, env=os.environ,
                            grace_s=runtime.settings.shutdown_grace_s, announce=output)
    # with secret references, SIGHUP refreshes them in every worker process (and here, for
    # the children started after it)
    refresh_secrets_on_sighup(runtime, also=lambda: supervisor.forward(signal.SIGHUP))
    await supervisor.start()
    try:
        if await first_of(supervisor.wait_ready(), stop.wait()) == 0:
            output.ready(supervisor, runtime)
            await stop.wait()
        if not as_json:
            err_console.print(f"Stopping: {processes} worker processes finish their work in "
                              f"hand (up to {runtime.settings.shutdown_grace_s:g}s, "
                              "TOREN_SHUTDOWN_GRACE)…")
    finally:
        clean = await supervisor.stop()
    output.stopped(supervisor, clean)
    return clean


async def first_of(*waits: Coroutine[Any, Any, Any]) -> int:
    """Await ``waits`` until one is done; cancel the others; the index of the one done."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return next(index for index, task in enumerate(tasks) if task in done)


class SupervisorOutput:
    """What a supervising command prints: its ready line, which names every child, then
    each child's restart, and each death (before the ready line too: a child that cannot
    start is seen at once); JSON lines with ``--json`` (a last ``stopped`` line too), else
    deaths are logged and restarts said on stderr."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.announced = False

    def __call__(self, event: dict[str, Any]) -> None:
        """A ``Supervisor`` event (its ``announce``)."""
        if event["event"] == "child_ready" and not event["restarted"]:
            return  # the supervisor's own ready line names its first children
        event = {key: value for key, value in event.items() if key != "info"}
        if self.as_json:
            if self.announced or event["event"] != "child_ready":
                print_json(event)
        elif event["event"] == "child_ready":
            err_console.print(f"worker process {event['slot']} is back (pid {event['pid']}, "
                              f"worker {safe(event['worker'])})")

    def ready(self, supervisor: Supervisor, runtime: Runtime,
              extra: dict[str, Any] | None = None) -> None:
        """Print the ready line: what the children serve, and who they are."""
        self.announced = True
        described = supervisor.describe()
        if self.as_json:
            print_json({"event": "ready", "lane": runtime.settings.lane,
                        "lane_agents": runtime.lane_agents,
                        "agents": [agent.to_json() for agent in runtime.agents.values()]}
                       | described | (extra or {}))
            return
        console.print(f"[bold]Toren worker supervisor[/] · {described['processes']} worker "
                      f"processes (supervisor {safe(supervisor.id)})")
        console.print(f"  lane:     {runtime.settings.lane}")
        console.print(f"  agents:   {safe(', '.join(runtime.lane_agents)) or 'none'}")
        for child in described["children"]:
            console.print(f"  process {child['slot']}: pid {child['pid']}, worker "
                          f"{safe(child['worker'])}")

    def stopped(self, supervisor: Supervisor, clean: bool) -> None:
        """With ``--json``, the last line: whether every child drained in time."""
        if self.as_json:
            print_json({"event": "stopped", "supervisor": supervisor.id, "clean": clean})
