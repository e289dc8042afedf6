"""toren-hello: an example Toren plugin with a tool (``greet``) and a channel (``hello-log``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import toren
from toren.seams.channels import Channel

__version__ = "0.1.0"

#: Overrides where the hello-log channel writes (default: hello-log.txt under TOREN_HOME).
LOG_ENV_VAR = "TOREN_HELLO_LOG"


@toren.tool(idempotent=True)
def greet(name: str) -> str:
    """Greet someone by name.

    Args:
        name: Who to greet, e.g. "Ada".
    """
    return f"Hello, {name}!"


class HelloLogChannel(Channel):
    """Appends one line to a log file when it starts and one when it stops.

    The file is ``TOREN_HELLO_LOG`` if set, else ``hello-log.txt`` in the runtime's
    ``TOREN_HOME`` (``./.toren`` by default). It shows the channel lifecycle and nothing else.
    """

    name = "hello-log"
    description = "writes a line to a log file when it starts and when it stops"

    def __init__(self) -> None:
        self.path: Path | None = None

    async def start(self, runtime: Any) -> None:
        configured = os.environ.get(LOG_ENV_VAR)
        self.path = Path(configured) if configured else runtime.settings.home / "hello-log.txt"
        agents = ", ".join(sorted(runtime.agents)) or "none"
        await asyncio.to_thread(_append, self.path, f"started (agents: {agents})")

    async def stop(self) -> None:
        if self.path is not None:
            await asyncio.to_thread(_append, self.path, "stopped")
            self.path = None


def _append(path: Path, message: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{stamp} hello-log {message}\n")


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(greet)


@toren.hookimpl
def register_channels(register: Callable[[Channel], None]) -> None:
    register(HelloLogChannel())
