"""The host API: ``toren.Runtime`` embeds Toren in an asyncio program; the CLI is built on it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from toren.agents import AgentSpec, check_env, discover_agent_dirs, load_agents
from toren.config import Settings
from toren.drivers import driver_class
from toren.interfaces import Migration, Queue, Store
from toren.interfaces import Runtime as RuntimeDriver
from toren.plugins import PluginHost

log = logging.getLogger(__name__)


class Runtime:
    """Toren in one process: plugins, agents, the store, the queue and (optionally) workers.

    Construction loads and validates everything that needs no database (plugins, agent
    directories, required environment, drivers), so a bad configuration fails before anything
    is created. ``start()`` connects, migrates and starts workers; ``stop()`` undoes it.

    Args:
        dirs: agent directories (see ``toren.agents.discover_agent_dirs``); ``None`` means the
            current directory. Pass ``agents=`` instead to serve already loaded specs.
        settings: configuration; defaults to ``Settings.from_env()``.
        plugins: a loaded ``PluginHost``; defaults to loading per ``settings.load_plugins``.
    """

    def __init__(
        self,
        dirs: Sequence[Path] | None = None,
        *,
        settings: Settings | None = None,
        plugins: PluginHost | None = None,
        agents: Sequence[AgentSpec] | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.plugins = plugins or PluginHost(self.settings.load_plugins)
        if agents is None:
            agents = load_agents(discover_agent_dirs(dirs), self.plugins.tools, self.check_model)
        self.agents: dict[str, AgentSpec] = {agent.name: agent for agent in agents}
        check_env(self.agents.values(), self._provider_env())
        self.store: Store = driver_class("store", self.settings.store_driver)(self.settings)
        self._queue_class = driver_class("queue", self.settings.queue_driver)
        self._runtime_class = driver_class("runtime", self.settings.runtime_driver)
        self.queue: Queue | None = None
        self.workers: RuntimeDriver | None = None
        self.started = False

    def check_model(self, model_id: str) -> object:
        """Resolve a model id to its provider's ``Model``; ``ConfigError`` if none serves it."""
        return self.plugins.provider_for(model_id).get_model(model_id)

    def _provider_env(self) -> dict[str, list[str]]:
        needed: dict[str, list[str]] = {}
        for agent in self.agents.values():
            models = {agent.model, *(sub.model for sub in agent.subagents.values())}
            for model_id in models:
                needed.setdefault(agent.name, []).extend(
                    self.plugins.provider_for(model_id).required_env)
        return needed

    async def start(self, *, workers: bool = True, migrate: bool = True) -> None:
        """Connect to the database, apply migrations, open the queue, start workers."""
        await self.store.open()
        try:
            if migrate:
                applied = await self.store.migrate(list(self.agents.values()))
                for migration in applied:
                    log.info("applied migration %s/%04d_%s", migration.scope, migration.version,
                             migration.name)
            self.queue = self._queue_class(self.settings, self.store)
            await self.queue.open()
            if workers:
                self.workers = self._runtime_class(self.settings)
                await self.workers.start(self)
        except BaseException:
            await self.stop()
            raise
        self.started = True

    async def stop(self) -> None:
        """Stop workers, then close the queue and the store. Safe to call twice."""
        if self.workers is not None:
            await self.workers.stop()
            self.workers = None
        if self.queue is not None:
            await self.queue.close()
            self.queue = None
        await self.store.close()
        self.started = False

    async def pending_migrations(self) -> list[Migration]:
        return await self.store.pending_migrations(list(self.agents.values()))

    def describe(self) -> dict[str, Any]:
        """What this runtime serves and where its state lives (printed by ``toren dev``)."""
        return {
            "database": self.store.description,
            "queue": self.queue.description if self.queue else None,
            "workers": self.workers.description if self.workers else None,
            "agents": [agent.to_json() for agent in self.agents.values()],
        }

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()
