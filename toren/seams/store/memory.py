"""Memories: what agents keep beyond a session (``memory:``), written once per tool call and
listed, edited and erased by people."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from toren.core.memory import (
    MIN_SIMILARITY,
    MemoryRecord,
    MemoryVector,
    MemoryView,
    MemoryWriteResult,
    NewMemory,
)


class MemoryStore(abc.ABC):
    """Where memories are kept (``docs/guides/memory.md``).

    The task loop (``toren.execution.memory``) writes through ``remember``,
    ``update_memory`` and ``forget_memory``, each with the tool call's idempotency key: a key
    that wrote once returns that first write's result and changes nothing (a worker that died
    after writing, resumed, never writes twice; a memory a person erased meanwhile stays
    erased). It reads through ``recall_memories`` and ``pinned_memories``, which return only
    what its ``MemoryView`` sees. The host API (``MemoryService``: ``toren memory``,
    ``/memories``, the console) lists, reads, edits and erases any memory.
    """

    @abc.abstractmethod
    async def remember(self, key: str, memory: NewMemory) -> MemoryWriteResult:
        """Keep a new memory, unless ``key`` wrote before; its id is new (a UUID)."""

    @abc.abstractmethod
    async def update_memory(self, key: str, view: MemoryView, memory_id: str, *,
                            content: str | None = None, pinned: bool | None = None,
                            vector: MemoryVector | None = None) -> MemoryWriteResult:
        """Change a memory ``view`` sees and its agent wrote (``not_found`` otherwise), unless
        ``key`` wrote before. ``None`` leaves a field as it is; ``vector`` is the new
        content's (a memory whose content changed without one loses its old vector)."""

    @abc.abstractmethod
    async def forget_memory(self, key: str, view: MemoryView, memory_id: str
                            ) -> MemoryWriteResult:
        """Erase a memory ``view`` sees and its agent wrote (``not_found`` otherwise), unless
        ``key`` wrote before."""

    @abc.abstractmethod
    async def recall_memories(self, view: MemoryView, query: str | None, *, limit: int,
                              scope: str | None = None, vector: MemoryVector | None = None,
                              min_similarity: float = MIN_SIMILARITY) -> list[MemoryRecord]:
        """The memories ``view`` sees that match ``query`` (full-text: any of its words,
        stemmed), best first: relevance weighed by recency (half weight after 30 days without
        a change), each with its ``score``; without a query, the most recently changed.
        ``scope`` narrows to one scope. With ``vector`` (the query's) and a store that
        ``semantic_recall``s, a memory whose vector of the same embedder is similar (cosine
        ``min_similarity`` or more) matches too, and similarity adds to the relevance."""

    async def semantic_recall(self) -> bool:
        """Whether ``recall_memories`` ranks by vectors here (the Postgres store: pgvector is
        loaded in the database). ``False`` by default: vectors are kept, recall is by words.
        Called by the workers at start (a note for agents with ``memory.embeddings``)."""
        return False

    @abc.abstractmethod
    async def pinned_memories(self, view: MemoryView, *, limit: int) -> list[MemoryRecord]:
        """The pinned memories ``view`` sees, most recently changed first (the task loop adds
        them to the system prompt as a task starts)."""

    @abc.abstractmethod
    async def list_memories(self, *, agents: Sequence[str] | None, subject: str | None = None,
                            scope: str | None = None, search: str | None = None,
                            limit: int = 100) -> list[MemoryRecord]:
        """Memories of ``agents`` (``None``: every agent's), most recently changed first (best
        match first with ``search``), filtered by subject and scope. Called by ``toren memory
        list``, ``GET /memories`` and the console."""

    @abc.abstractmethod
    async def get_memory(self, memory_id: str) -> MemoryRecord | None:
        """One memory by id (``None``: none, or the id is no UUID)."""

    @abc.abstractmethod
    async def edit_memory(self, memory_id: str, *, content: str | None = None,
                          pinned: bool | None = None) -> MemoryRecord | None:
        """A person's change to a memory; the memory as it is now (``None``: none)."""

    @abc.abstractmethod
    async def delete_memories(self, *, ids: Sequence[str] = (),
                              agents: Sequence[str] | None = None,
                              subject: str | None = None) -> list[str]:
        """Erase memories: those of ``ids``, or (with no ids) every memory of ``agents``
        (``None``: any agent's) about ``subject``; the ids erased. Erased means gone: no
        recall finds it again. Called by ``toren memory rm``, ``DELETE /memories`` and the
        console."""

    @abc.abstractmethod
    async def expire_memories(self, agent: str, older_than_s: float) -> int:
        """Erase ``agent``'s memories unchanged for ``older_than_s`` seconds (``memory.keep``);
        how many (the ledger of memory writes older than 30 days goes too). Called hourly by
        the workers serving ``agent`` (``MemoryService.expire``)."""
