"""Options and helpers shared by commands that load agents."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

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

    return asyncio.run(go())
