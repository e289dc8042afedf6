"""toren-hello: an example Toren plugin with a tool (``greet``) and two channels: ``hello-log``
(the channel lifecycle, nothing else) and ``parley`` (a chat platform, ``toren_hello.parley``).

This is the module the entry point names, so it declares the plugin API versions it is
written for and holds the hook implementations. It imports Toren only through ``toren.plugin``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from toren.plugin import Channel, ChannelContext, hookimpl, tool

__version__ = "0.1.0"

#: The plugin API versions this plugin works with (a PEP 440 range, checked when it loads).
TOREN_PLUGIN_API = ">=1.0,<2"

#: Overrides where the hello-log channel writes (default: hello-log.txt under TOREN_HOME).
LOG_ENV_VAR = "TOREN_HELLO_LOG"


@tool(idempotent=True)
def greet(name: str) -> str:
    """Greet someone by name.

    Args:
        name: Who to greet, e.g. "Ada".
    """
    return f"Hello, {name}!"


class HelloLogChannel(Channel):
    """Appends one line to a log file when it starts and one when it stops.

    The file is ``TOREN_HELLO_LOG`` if set, else ``hello-log.txt`` in the deployment's
    ``TOREN_HOME`` (``./.toren`` by default). It shows the channel lifecycle and nothing else.
    """

    name = "hello-log"
    description = "writes a line to a log file when it starts and when it stops"

    def __init__(self) -> None:
        self.path: Path | None = None

    async def start(self, context: ChannelContext) -> None:
        configured = os.environ.get(LOG_ENV_VAR)
        self.path = Path(configured) if configured else context.home / "hello-log.txt"
        agents = ", ".join(sorted(context.channel_agents(self.name))) or "none"
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


@hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(greet)


@hookimpl
def register_channels(register: Callable[[Channel], None]) -> None:
    # imported here, not at the top: every `toren` command (--help too) imports this module,
    # and a chat channel pulls in aiohttp and Toren's chat host
    from toren_hello.parley import ParleyChannel

    register(HelloLogChannel())
    register(ParleyChannel())
