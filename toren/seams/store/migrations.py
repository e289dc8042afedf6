"""Schemas and their migrations: the control schema and one schema per agent."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from toren.seams.shapes import AgentSchema, Migration


class Migrator(abc.ABC):
    """Bringing the database to the schema this version needs, and the agents registered in it.

    ``Runtime.start`` calls ``migrate`` right after ``open`` (every process that opens the
    store, unless started with ``migrate=False``); ``toren db migrate`` calls
    ``pending_migrations`` and, with ``--print``, ``render_migrations``. The run reader calls
    ``registered_agents`` to find a run whose agent it is not told.
    """

    @abc.abstractmethod
    async def pending_migrations(self, agents: Sequence[AgentSchema]) -> list[Migration]:
        """Migrations not yet applied for the control schema and each agent's schema (an
        agent's have its ``schema_name`` as their ``scope``), in the order they apply."""

    @abc.abstractmethod
    async def migrate(self, agents: Sequence[AgentSchema]) -> list[Migration]:
        """Apply pending migrations under a lock, register the agents; return what was applied.

        Idempotent and safe when several processes call it at once: each migration is
        applied once, by one of them. Registering records each agent's name, schema, model,
        directory and ``accepts_from`` (an ``AgentSpec``'s ``acceptsFrom:``; none if the
        object has no such attribute), replacing what its previous start registered. An agent
        whose ``schema_name`` belongs to an agent of another name is refused with
        ``ConfigError`` (``my-crew`` and ``my_crew`` share ``agent_my_crew``).
        """

    @abc.abstractmethod
    def render_migrations(self, migrations: Sequence[Migration]) -> str:
        """The SQL of ``migrations`` as one script to review (``toren db migrate --print``)."""

    @abc.abstractmethod
    async def registered_agents(self) -> dict[str, str]:
        """Agent name -> schema of every agent ever registered in this database."""

    @abc.abstractmethod
    async def accepted_callers(self, name: str) -> list[str] | None:
        """Whom the agent ``name`` accepts cross-agent calls from (its ``acceptsFrom:``, as
        its fleet registered it at its last start); ``None`` if no agent of that name is
        registered in this database. Called by the task loop before a peer call or a
        background run creates the run (``toren.host.children``)."""
