"""The ``inprocess`` runtime driver: worker pollers as asyncio tasks in this process."""

from __future__ import annotations

from typing import Any

from toren.config import Settings
from toren.host.worker import Worker
from toren.seams.interfaces import WorkerRuntime


class InProcessRuntime(WorkerRuntime):
    """Runs up to ``TOREN_CONCURRENCY`` messages at once inside this process."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.worker: Worker | None = None

    @property
    def description(self) -> str:
        return f"in-process workers (concurrency {self.settings.concurrency})"

    async def start(self, host: Any) -> None:
        self.worker = Worker(host)
        await self.worker.start()

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.stop()
            self.worker = None
