"""The ``PromptStore`` of the Postgres store: ``prompts`` in each agent's schema."""

from __future__ import annotations

from collections.abc import Sequence

from toren.plugin import Settings
from toren.plugin.drivers import PromptStore, schema_name_for
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query


class PostgresPromptStore(PostgresConnection, PromptStore):
    """Prompts by SHA-256 (agent migration ``0003_prompts``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        #: Prompts this process kept (or found kept), by agent and SHA-256.
        self._kept_prompts: set[tuple[str, str]] = set()

    async def save_prompt(self, agent: str, sha256: str, text: str) -> None:
        if (agent, sha256) in self._kept_prompts:
            return  # kept already: a task start costs no extra round trip after the first
        async with self.pool.connection() as conn:
            await conn.execute(agent_query("save_prompt", schema_name_for(agent)),
                               {"sha256": sha256, "text": text})
        self._kept_prompts.add((agent, sha256))

    async def load_prompts(self, agent: str, hashes: Sequence[str]) -> dict[str, str]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(agent_query("load_prompts", schema_name_for(agent)),
                                        {"hashes": list(hashes)})
            return dict(await cursor.fetchall())
