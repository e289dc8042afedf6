"""The worker runtime driver's interface (``toren.runtime``, ``TOREN_RUNTIME``)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren.config import Settings


class WorkerRuntime(abc.ABC):
    """Where workers run: pollers in this process (``inprocess``) or elsewhere (``fargate``).

    Made by the host at startup (``driver(settings)``); ``start`` is awaited by
    ``Runtime.start`` when it starts workers, ``stop`` by ``Runtime.stop``.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying how work is executed (printed at startup)."""

    @abc.abstractmethod
    async def start(self, host: Any) -> None:
        """Start executing work for ``host`` (a ``toren.Runtime``); return once started."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop claiming work, finish or release what is in hand, and return."""
