"""The database as an operator sees it: ``toren db migrate``, ``toren serve``'s first
migration and ``toren run``'s banner call this service."""

from __future__ import annotations

from collections.abc import Sequence

from toren.seams.shapes import AgentSchema, Migration
from toren.seams.store import Store


class DatabaseService:
    """Open and close the store without starting a runtime, and its migrations: what is
    pending for ``agents`` (the runtime's), its SQL, and applying it. ``runtime.database``."""

    def __init__(self, store: Store, agents: Sequence[AgentSchema]) -> None:
        self._store = store
        self._agents = agents

    @property
    def description(self) -> str:
        """Where the state lives, without secrets (printed by ``toren db``, ``toren run``)."""
        return self._store.description

    def missing(self) -> str | None:
        """Where the database would be, when it certainly does not exist yet (``Store.missing``:
        no connection made, nothing created), else ``None``. Read-only commands ask it before
        opening, which would create an embedded database."""
        return self._store.missing()

    async def open(self) -> None:
        """Connect without migrating or starting anything (``Runtime.start`` does all)."""
        await self._store.open()

    async def close(self) -> None:
        await self._store.close()

    async def pending_migrations(self) -> list[Migration]:
        """Migrations not yet applied, for the control schema and every agent's schema."""
        return await self._store.pending_migrations(list(self._agents))

    def render_migrations(self, migrations: Sequence[Migration]) -> str:
        """The SQL of ``migrations``, as ``toren db migrate --print`` shows it."""
        return self._store.render_migrations(migrations)

    async def migrate(self) -> list[Migration]:
        """Apply what is pending for the control schema and every agent's schema."""
        return await self._store.migrate(list(self._agents))

    async def migrate_control(self) -> list[Migration]:
        """Apply what is pending for the control schema only (keys, files, workers): what a
        brand-new database needs before ``toren serve`` can check for API keys."""
        return await self._store.migrate([])
