"""The ``MemoryStore`` of the Postgres store: ``toren_control.memories`` and
``toren_control.memory_writes`` (control migration ``0028_memory``), queries in
``sql/memory.sql``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row

from toren.plugin.drivers import (
    MIN_SIMILARITY,
    RECENCY_HALF_LIFE_DAYS,
    MemoryRecord,
    MemoryStore,
    MemoryVector,
    MemoryView,
    MemoryWriteResult,
    NewMemory,
    is_memory_id,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import parse_queries


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/memory.sql").read_text("utf-8")
    return parse_queries(text)


def _record(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=str(row["id"]), agent=row["agent"], scope=row["scope"], subject=row["subject"],
        content=row["content"], pinned=row["pinned"], shared_with=tuple(row["shared_with"]),
        run_id=str(row["run_id"]) if row["run_id"] is not None else None,
        created_at=row["created_at"], updated_at=row["updated_at"],
        score=round(row["score"], 6) if row["score"] is not None else None)


def _view(view: MemoryView) -> dict[str, Any]:
    return {"agent": view.agent, "subject": view.subject, "scopes": list(view.scopes),
            "share_with": list(view.share_with)}


def _usable(vector: MemoryVector | None) -> bool:
    """Whether a vector can be compared: a text without words may embed to zeros, whose
    cosine distance is undefined."""
    return vector is not None and any(vector.values)


class PostgresMemoryStore(PostgresConnection, MemoryStore):
    """Memories in one control table; each write and its ledger row are one transaction."""

    #: Whether pgvector is loaded (``semantic_recall``), once known.
    _vectors_loaded: bool | None = None

    async def _write(self, key: str, agent: str, action: str, statement: str,
                     params: dict[str, Any], memory_id: str | None,
                     vector: MemoryVector | None = None) -> MemoryWriteResult:
        """Claim ``key``, run the write, record its outcome, in one transaction; the first
        outcome when the key wrote before. The claim's row lock makes a racing twin wait for
        the first write's commit and then read its outcome."""
        queries = _queries()
        async with self.pool.connection() as conn, conn.transaction():
            claimed = await (await conn.execute(queries["claim_write"], {
                "key": key, "agent": agent, "action": action})).fetchone()
            if claimed is None:
                row = await (await conn.execute(queries["earlier_write"],
                                                {"key": key})).fetchone()
                assert row is not None
                return MemoryWriteResult(row[0] or "not_found",
                                         str(row[1]) if row[1] is not None else memory_id,
                                         first=False)
            if memory_id is not None and not is_memory_id(memory_id):
                outcome, written = "not_found", None
            else:
                cursor = await conn.execute(statement, params)
                done = action == "remember" or await cursor.fetchone() is not None
                outcome = {"remember": "remembered", "update": "updated",
                           "forget": "forgotten"}[action] if done else "not_found"
                written = memory_id if done else None
                if done and action != "forget" and _usable(vector):
                    assert vector is not None
                    await conn.execute(queries["keep_vector"], {
                        "id": memory_id, "embedder": vector.embedder,
                        "vector": list(vector.values)})
                elif done and action == "update" and params.get("content") is not None:
                    # new words, no vector for them: the old one would find the old words
                    await conn.execute(queries["drop_vector"], {"id": memory_id})
            await conn.execute(queries["settle_write"], {
                "key": key, "outcome": outcome, "memory_id": written})
        return MemoryWriteResult(outcome, written or memory_id)  # type: ignore[arg-type]

    async def remember(self, key: str, memory: NewMemory) -> MemoryWriteResult:
        memory_id = str(uuid.uuid4())
        return await self._write(key, memory.agent, "remember", _queries()["insert_memory"], {
            "id": memory_id, "agent": memory.agent, "scope": memory.scope,
            "subject": memory.subject, "content": memory.content, "pinned": memory.pinned,
            "shared_with": list(memory.shared_with), "run_id": memory.run_id}, memory_id,
            memory.vector)

    async def update_memory(self, key: str, view: MemoryView, memory_id: str, *,
                            content: str | None = None, pinned: bool | None = None,
                            vector: MemoryVector | None = None) -> MemoryWriteResult:
        return await self._write(key, view.agent, "update", _queries()["update_own_memory"],
                                 _view(view) | {"id": memory_id, "content": content,
                                                "pinned": pinned}, memory_id, vector)

    async def forget_memory(self, key: str, view: MemoryView, memory_id: str
                            ) -> MemoryWriteResult:
        return await self._write(key, view.agent, "forget", _queries()["forget_own_memory"],
                                 _view(view) | {"id": memory_id}, memory_id)

    async def _select(self, name: str, params: dict[str, Any]) -> list[MemoryRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            try:
                await cursor.execute(_queries()[name], params)
            except psycopg.DataError:
                return []  # an id that is no UUID names no memory
            return [_record(row) for row in await cursor.fetchall()]

    async def recall_memories(self, view: MemoryView, query: str | None, *, limit: int,
                              scope: str | None = None, vector: MemoryVector | None = None,
                              min_similarity: float = MIN_SIMILARITY) -> list[MemoryRecord]:
        params = _view(view) | {"query": query or None, "scope": scope, "limit": limit,
                                "pinned_only": False,
                                "half_life_days": RECENCY_HALF_LIFE_DAYS}
        if query and _usable(vector) and await self.semantic_recall():
            assert vector is not None
            return await self._select("recall_memories_semantic", params | {
                "embedder": vector.embedder, "vector": list(vector.values),
                "min_similarity": min_similarity})
        return await self._select("recall_memories", params)

    async def semantic_recall(self) -> bool:
        if self._vectors_loaded is None:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_queries()["vectors_loaded"])).fetchone()
            self._vectors_loaded = bool(row and row[0])
        return self._vectors_loaded

    async def pinned_memories(self, view: MemoryView, *, limit: int) -> list[MemoryRecord]:
        return await self._select("recall_memories", _view(view) | {
            "query": None, "scope": None, "limit": limit, "pinned_only": True,
            "half_life_days": RECENCY_HALF_LIFE_DAYS})

    async def list_memories(self, *, agents: Sequence[str] | None, subject: str | None = None,
                            scope: str | None = None, search: str | None = None,
                            limit: int = 100) -> list[MemoryRecord]:
        return await self._select("list_memories", {
            "agents": list(agents) if agents is not None else None, "subject": subject,
            "scope": scope, "search": search or None, "limit": limit})

    async def get_memory(self, memory_id: str) -> MemoryRecord | None:
        if not is_memory_id(memory_id):
            return None
        found = await self._select("get_memory", {"id": memory_id})
        return found[0] if found else None

    async def edit_memory(self, memory_id: str, *, content: str | None = None,
                          pinned: bool | None = None) -> MemoryRecord | None:
        if not is_memory_id(memory_id):
            return None
        found = await self._select("edit_memory", {"id": memory_id, "content": content,
                                                   "pinned": pinned})
        return found[0] if found else None

    async def delete_memories(self, *, ids: Sequence[str] = (),
                              agents: Sequence[str] | None = None,
                              subject: str | None = None) -> list[str]:
        agent_list = list(agents) if agents is not None else None
        params: dict[str, Any]
        if ids:
            name, params = "delete_memories_by_id", {
                "ids": [i for i in ids if is_memory_id(i)], "agents": agent_list}
        elif subject is not None:
            name, params = "delete_memories_of_subject", {"subject": subject,
                                                          "agents": agent_list}
        else:
            return []
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()[name], params)
            return [str(row[0]) for row in await cursor.fetchall()]

    async def expire_memories(self, agent: str, older_than_s: float) -> int:
        async with self.pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(_queries()["expire_memories"], {
                "agent": agent, "older_than_s": older_than_s})
            await conn.execute(_queries()["expire_memory_writes"], {"agent": agent})
            return cursor.rowcount
