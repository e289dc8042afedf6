"""Memories (``memory:``): ``toren memory``, ``/memories`` and the console's memory page call
this service; a person sees, corrects and erases what agents keep (docs/guides/memory.md)."""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping

from toren.core.decisions import unstorable
from toren.core.memory import MEMORY_SCOPES, MemoryRecord, check_content, is_memory_id
from toren.errors import InvalidMemory, MemoryNotFound
from toren.host.services.values import checked_subject
from toren.seams.store.memory import MemoryStore

#: Most memories one listing returns.
MAX_MEMORY_PAGE = 1000
#: Longest search a listing takes, in characters.
MAX_SEARCH_CHARS = 1000


class MemoryService:
    """List, read, edit and erase memories, limited to the served ``agents`` (a runtime
    serving none, as the CLI uses, sees every agent's). ``runtime.memory``; needs the store
    open."""

    def __init__(self, store: MemoryStore, agents: Collection[str]) -> None:
        self._store = store
        self._agents = list(agents)

    def _scope(self, agent: str | None) -> builtins.list[str] | None:
        """The agents a call may see: ``agent`` if served (``[]``: none), else every served
        agent (``None``: every agent, for a runtime serving none)."""
        if agent is not None:
            if unstorable(agent) is not None or "\x00" in agent:
                return []  # no agent has such a name
            return [agent] if not self._agents or agent in self._agents else []
        return self._agents or None

    async def list(self, *, agent: str | None = None, subject: str | None = None,
                   scope: str | None = None, search: str | None = None,
                   limit: int = 100) -> builtins.list[MemoryRecord]:
        """Memories, most recently changed first (best match first with ``search``: any of its
        words), filtered by agent, subject and scope. ``InvalidMemory`` for a filter that
        cannot match anything a memory holds (an unknown scope, a limit out of 1..1000)."""
        if scope is not None and scope not in MEMORY_SCOPES:
            raise InvalidMemory(f"unknown memory scope {scope!r}; one of "
                                f"{', '.join(MEMORY_SCOPES)}")
        if not 1 <= limit <= MAX_MEMORY_PAGE:
            raise InvalidMemory(f"limit must be 1 to {MAX_MEMORY_PAGE}")
        subject = checked_subject(subject)
        if search is not None and (len(search) > MAX_SEARCH_CHARS or "\x00" in search):
            raise InvalidMemory(f"search must be at most {MAX_SEARCH_CHARS} characters, "
                                "with no NUL")
        agents = self._scope(agent)
        if agents == []:
            return []
        return await self._store.list_memories(agents=agents, subject=subject, scope=scope,
                                               search=search or None, limit=limit)

    async def get(self, memory_id: str) -> MemoryRecord:
        """One memory; ``MemoryNotFound`` if there is none with this id (of a served agent)."""
        record = await self._store.get_memory(memory_id) if is_memory_id(memory_id) else None
        scope = self._scope(None)
        if record is None or (scope is not None and record.agent not in scope):
            raise MemoryNotFound(f"no memory has the id {memory_id!r}; see `toren memory "
                                 "list`")
        return record

    async def edit(self, memory_id: str, *, content: str | None = None,
                   pinned: bool | None = None) -> MemoryRecord:
        """A person's correction: new text, or pinned or not. ``InvalidMemory`` for text a
        memory cannot hold or a change of nothing; ``MemoryNotFound``."""
        if content is None and pinned is None:
            raise InvalidMemory("nothing to change: give the new content, pinned, or both")
        if content is not None:
            try:
                check_content(content)
            except ValueError as exc:
                raise InvalidMemory(str(exc)) from None
        await self.get(memory_id)
        record = await self._store.edit_memory(memory_id, content=content, pinned=pinned)
        if record is None:  # erased in between
            raise MemoryNotFound(f"no memory has the id {memory_id!r}")
        return record

    async def delete(self, memory_id: str) -> MemoryRecord:
        """Erase one memory (no recall finds it again); the memory as it was.
        ``MemoryNotFound``."""
        record = await self.get(memory_id)
        erased = await self._store.delete_memories(ids=[memory_id])
        if not erased:
            raise MemoryNotFound(f"no memory has the id {memory_id!r}")
        return record

    async def expire(self, keeps: Mapping[str, float]) -> int:
        """Erase the memories of each agent in ``keeps`` unchanged for longer than its
        ``memory.keep`` (seconds); how many. The workers call it hourly."""
        erased = 0
        for agent, keep_s in keeps.items():
            erased += await self._store.expire_memories(agent, keep_s)
        return erased

    async def erase_subject(self, subject: str, *, agent: str | None = None
                            ) -> builtins.list[str]:
        """Erase every memory about ``subject`` (of ``agent``, or of every served agent): what
        a person asks for when they want an agent to forget them. The ids erased."""
        checked = checked_subject(subject)
        assert checked is not None
        agents = self._scope(agent)
        if agents == []:
            return []
        return await self._store.delete_memories(agents=agents, subject=checked)
