"""Options and helpers shared by commands that load agents."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from toren.cli.output import err_console
from toren.errors import NoDatabase

if TYPE_CHECKING:
    import asyncio

    from toren.host.runtime import Runtime

T = TypeVar("T")

DirsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--dir", "-d", metavar="DIR",
        help="An agent directory, or a directory of agent directories (repeatable). "
             "Default: the current directory.",
        envvar="TOREN_DIRS",
    ),
]


def load_runtime(dirs: list[Path] | None, agent: str | None = None, *,
                 lane: str | None = None) -> Runtime:
    """Load plugins, agents and drivers, validating everything before touching the database.

    With ``agent`` (the command's AGENT argument), also check that one of the directories
    serves it, so a misspelt name fails at once instead of after starting the database.
    ``lane`` overrides ``TOREN_LANE`` (``toren worker --lane``; ``toren dev`` serves ``all``).
    """
    from toren.config import Settings
    from toren.host.runtime import Runtime  # not at import: `toren --help` stays light

    settings = None
    if lane is not None:  # the option wins over TOREN_LANE
        settings = dataclasses.replace(Settings.from_env(), lane=lane)
    runtime = Runtime(dirs or None, settings=settings)
    if agent is not None:
        runtime.check_served(agent)
    return runtime


def refresh_secrets_on_sighup(runtime: Runtime,
                              also: Callable[[], None] | None = None) -> None:
    """On SIGHUP, read the startup's secret references again (``toren.seams.secrets``) and
    make model clients afresh, so a rotated key is used from the next model call. Settings
    read at startup (DATABASE_URL, TOREN_*) keep their values until a restart. Without
    secret references SIGHUP keeps its default action (a closed terminal ends ``toren dev``).
    ``also`` is called on each SIGHUP too (a supervisor passes it on to its worker processes).
    """
    import asyncio
    import logging
    import os

    from toren.seams.secrets import has_startup_references, refresh

    if not has_startup_references():
        return

    log = logging.getLogger("toren.secrets")
    loop = asyncio.get_running_loop()

    async def reload() -> None:
        try:
            names = await asyncio.to_thread(refresh, os.environ)
        except Exception as exc:  # keep the values in hand: a broken refresh must not stop work
            log.error("SIGHUP: secrets not refreshed: %s", getattr(exc, "message", exc))
            return
        await runtime.forget_models()
        log.warning("SIGHUP: refreshed %d variable(s) from secrets: %s", len(names),
                    ", ".join(names) or "none")

    def on_sighup() -> None:
        if also is not None:
            also()
        task = loop.create_task(reload(), name="toren-secrets-refresh")
        _refreshes.add(task)
        task.add_done_callback(_refreshes.discard)

    loop.add_signal_handler(signal.SIGHUP, on_sighup)


_refreshes: set[asyncio.Task[None]] = set()


def served_dirs(dirs: list[Path] | None) -> list[Path]:
    """The agent directories a command was given, absolute (the current one by default)."""
    return [path.absolute() for path in dirs or [Path.cwd()]]


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, where SIGTERM stops the command as Ctrl-C does.

    The first SIGTERM cancels ``main`` (its ``finally`` blocks stop the runtime), then
    ``KeyboardInterrupt`` ends the command the way Ctrl-C does, through the interpreter's normal
    exit, which also releases this process's handle on the embedded Postgres. Without this, a
    SIGTERM killed the process on the spot. A second SIGTERM kills at once.
    """
    import asyncio  # here: `toren --help` lists commands that import this module

    terminated = False

    async def guarded() -> T:
        task = asyncio.current_task()
        if task is None or threading.current_thread() is not threading.main_thread():
            return await main  # signal handlers only work in the main thread
        loop = asyncio.get_running_loop()

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            loop.remove_signal_handler(signal.SIGTERM)  # the next one takes the default action
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt from None
        raise


def require_database(runtime: Runtime) -> None:
    """Refuse to go on when the database ``runtime`` would open does not exist yet: a command
    that only works on existing records (``toren jobs list`` run from another directory)
    would otherwise create an empty embedded database and show nothing. The error says where
    it looked and how to point the command elsewhere (a ``.toren`` found in a parent
    directory is named)."""
    missing = runtime.database.missing()
    if missing is None:
        return
    hint = ""
    if "TOREN_HOME" not in os.environ:
        found = next((parent / ".toren" for parent in Path.cwd().parents
                      if (parent / ".toren" / "pgdata" / "PG_VERSION").exists()), None)
        if found is not None:
            hint = f" There is one in {found}: run the command from {found.parent}, or"
    hint = hint or " Run the command from the directory where `toren dev` ran, or"
    raise NoDatabase(
        f"no Toren database to read here: {missing}, and this command creates none.{hint} "
        "set TOREN_HOME to that directory's .toren, DATABASE_URL to a Postgres server, or "
        "TOREN_URL (--url) to a deployment's API.")


def with_database(action: Callable[[Runtime], Awaitable[T]], *, create: bool = False) -> T:
    """Run ``action`` with a runtime that serves no agent: the database only (``toren keys``;
    the operator commands use ``toren.cli.operator.operate``), migrated, no workers.

    Without ``create``, a database that does not exist yet is an error (``require_database``)
    instead of a new, empty one."""
    return run_async(on_database(action, create=create))


async def on_database(action: Callable[[Runtime], Awaitable[T]], *, create: bool = False) -> T:
    """``with_database`` for a caller already on the event loop (``toren eval``'s reads)."""
    from toren.host.runtime import Runtime

    runtime = Runtime(agents=[])
    if not create:
        require_database(runtime)
    await runtime.start(workers=False)
    try:
        return await action(runtime)
    finally:
        await runtime.stop()


def run_interruptible(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` for a command that works runs in this process.

    Every Ctrl-C (or SIGTERM) cancels ``main``'s task: the first interrupts what it is doing,
    and its cleanup (``stop_runtime``) hands work back; a second one cancels that wait.
    Interrupted, the command exits with status 130 and no traceback, through the interpreter's
    normal exit (which also releases this process's handle on the embedded Postgres).
    """
    import asyncio

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return await main
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    try:
        return asyncio.run(guarded())
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise typer.Exit(code=130) from None


async def stop_runtime(runtime: Runtime, *, quiet: bool = False) -> None:
    """Stop ``runtime``, saying what takes time when the user interrupted the command.

    Stopping lets work in hand finish for up to ``TOREN_SHUTDOWN_GRACE`` seconds and hands
    back the rest. If Ctrl-C brought us here, that wait is announced, and a second Ctrl-C
    (see ``run_interruptible``) stops waiting: the work's lease then expires and the next
    worker takes it over, repeating at most the step that was in flight.
    """
    import asyncio

    task = asyncio.current_task()
    interrupted = task is not None and task.cancelling() > 0
    if interrupted and runtime.workers is not None and not quiet:
        grace = runtime.settings.shutdown_grace_s
        err_console.print(
            f"Stopping: work in hand gets up to {grace:g}s (TOREN_SHUTDOWN_GRACE) to finish "
            "its step, the rest is handed back to the queue. Press Ctrl-C again to quit now.")
    try:
        await runtime.stop()
    except asyncio.CancelledError:
        if not quiet:
            err_console.print(
                "Quitting without waiting: work in hand is handed over when its lease "
                f"expires (TOREN_LEASE_TTL, {runtime.settings.lease_ttl_s:g}s); the step in "
                "flight is made again.")
        raise
