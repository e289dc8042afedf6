"""Options and helpers shared by commands that load agents."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from toren.host.runtime import Runtime

T = TypeVar("T")

DirsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--dir", "-d",
        help="An agent directory, or a directory of agent directories (repeatable). "
             "Default: the current directory.",
        envvar="TOREN_DIRS",
    ),
]


def load_runtime(dirs: list[Path] | None) -> Runtime:
    """Load plugins, agents and drivers, validating everything before touching the database."""
    return Runtime(dirs or None)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, where SIGTERM stops the command as Ctrl-C does.

    The first SIGTERM cancels ``main`` (its ``finally`` blocks stop the runtime), then
    ``KeyboardInterrupt`` ends the command the way Ctrl-C does, through the interpreter's normal
    exit, which also releases this process's handle on the embedded Postgres. Without this, a
    SIGTERM killed the process on the spot. A second SIGTERM kills at once.
    """
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


def with_database(action: Callable[[Runtime], Awaitable[T]]) -> T:
    """Run ``action`` with a runtime that serves no agent: the database only (``toren jobs``,
    ``toren keys``), migrated, no workers."""

    async def go() -> T:
        runtime = Runtime(agents=[])
        await runtime.start(workers=False)
        try:
            return await action(runtime)
        finally:
            await runtime.stop()

    return run_async(go())
