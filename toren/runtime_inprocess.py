"""The ``inprocess`` runtime driver: worker pollers as asyncio tasks in this process."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from toren.config import Settings
from toren.interfaces import Runtime

log = logging.getLogger(__name__)


class InProcessRuntime(Runtime):
    """Runs up to ``TOREN_CONCURRENCY`` tasks at once inside this process."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def description(self) -> str:
        return f"in-process workers (concurrency {self.settings.concurrency})"

    async def start(self, host: Any) -> None:
        self.host = host

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
