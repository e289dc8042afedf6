"""The base of every store: one connection to one database, opened and closed by the host."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren.config import Settings


class StoreLifecycle(abc.ABC):
    """Connecting to the database, describing it, and saying whether it is reachable.

    Made by the host at startup (``driver(settings)``, in ``toren.Runtime.__init__``, before
    anything connects); ``open`` is awaited once by ``Runtime.start`` (or ``toren db`` /
    ``toren serve``) before any other method, ``close`` once at shutdown. A driver's classes
    for the other store interfaces share this base, so each can be built and tested alone.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying which database is in use (printed at startup; no password)."""

    def missing(self) -> str | None:
        """Without connecting or creating anything: where the database would be, in a phrase,
        when it certainly does not exist yet (an embedded database never started), else
        ``None``. Commands that only work on existing records (``toren jobs list``) ask it
        before ``open``, which would create the database. The default (a server is asked only
        when opened): ``None``."""
        return None

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect (starting the embedded database if configured). Raise ``DatabaseUnavailable``
        naming the host when it cannot be reached within the connect timeout."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections (the embedded database keeps running for other processes)."""

    @abc.abstractmethod
    async def health(self) -> dict[str, Any]:
        """``{"reachable": bool, ...}`` for ``GET /healthz`` (called per request); never
        raises."""
