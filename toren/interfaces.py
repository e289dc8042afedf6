"""Abstract bases of the one-of-N drivers chosen by configuration (stevedore namespaces).

``toren.store`` (``TOREN_STORE``), ``toren.queue`` (``TOREN_QUEUE``) and ``toren.runtime``
(``TOREN_RUNTIME``). The kernel talks to these bases only; it never imports an adapter.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren.agents import AgentSpec
    from toren.config import Settings


@dataclass(frozen=True)
class Migration:
    """One numbered migration of one scope (``control`` or an agent's schema)."""

    scope: str
    version: int
    name: str
    sql: str


class Store(abc.ABC):
    """Durable state: the control schema, one schema per agent, runs and their event log.

    Made by the host at startup (``driver(settings)``); ``open`` is awaited before any other
    method and ``close`` once at shutdown.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying which database is in use (printed at startup; no password)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect (starting the embedded database if configured). Raise ``DatabaseUnavailable``
        naming the host when it cannot be reached within the connect timeout."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections (the embedded database keeps running for other processes)."""

    @abc.abstractmethod
    async def pending_migrations(self, agents: Sequence[AgentSpec]) -> list[Migration]:
        """Migrations not yet applied for the control schema and each agent's schema."""

    @abc.abstractmethod
    async def migrate(self, agents: Sequence[AgentSpec]) -> list[Migration]:
        """Apply pending migrations under a lock, register the agents; return what was applied.

        Idempotent and safe when several processes call it at once.
        """

    @abc.abstractmethod
    def render_migrations(self, migrations: Sequence[Migration]) -> str:
        """The SQL of ``migrations`` as one script a DBA can review (``toren db migrate --print``)."""

    @abc.abstractmethod
    async def health(self) -> dict[str, Any]:
        """``{"reachable": bool, ...}`` for ``/healthz``; never raises."""


class Queue(abc.ABC):
    """Messages that wake workers: at-least-once, labelled by agent, with delayed delivery."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying where messages live (printed at startup)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect; awaited after the store is open."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop listening and release connections."""


class Runtime(abc.ABC):
    """Where workers run: pollers in this process (``inprocess``) or elsewhere (``fargate``)."""

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
