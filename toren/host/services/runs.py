"""Runs in pages, and where a run's events are read from: ``GET /runs``, ``GET /archive``,
the live event stream and ``toren jobs`` call this service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from toren.core.events import Event
from toren.core.runs import RunRecord
from toren.host.retention import ArchivedRunReader, is_archived
from toren.host.services.pages import Page, Position, read_page
from toren.seams.store import Store
from toren.seams.store.reader import RunReader


class RunsService:
    """Pages of runs (hot and archived) of the served agents, and the ``RunReader`` a run's
    events come from. ``runtime.runs``; ``Runtime.list_runs`` and the rest of the runs API
    stay on the ``Runtime``."""

    def __init__(self, store: Store, agents: Sequence[str],
                 archived_events: Callable[[RunRecord], Awaitable[list[Event]]]) -> None:
        self._store = store
        self._agents = agents
        self._archived_events = archived_events

    @property
    def reader(self) -> RunReader:
        """The hot tables' reader, which the server's live event streams share."""
        return self._store

    async def queue_state(self, record: RunRecord) -> dict[str, Any] | None:
        """Where the run stands in the queue: its priority, concurrency key and why it waits
        (``RunReader.queue_state``; docs/guides/flow-control.md)."""
        return await self._store.queue_state(record.agent, record.id)

    async def reader_for(self, record: RunRecord) -> RunReader:
        """Where ``record``'s events are read from: the hot tables, or its archive object,
        read and checked now (``ArchiveService.events``)."""
        if is_archived(record):
            return ArchivedRunReader(self._store, record, await self._archived_events(record))
        return self._store

    async def page(self, *, limit: int, before: Position | None = None,
                   agent: str | None = None, status: str | None = None,
                   kind: str | None = None, schedule: str | None = None) -> Page[RunRecord]:
        """Runs of the served agents (or of ``agent``) newest first, ``limit`` at most, after
        the page ending at ``before``; filters as ``RunReader.list_runs``."""
        return await read_page(
            lambda n, after: self._store.list_runs(
                agent=agent, status=status, limit=n, agents=list(self._agents), before=after,
                kind=kind, schedule=schedule), limit, before)

    async def every_run(self, page_size: int = 1000) -> AsyncIterator[list[RunRecord]]:
        """Every run of every registered agent, a page at a time, newest first."""
        before: Position | None = None
        while True:
            found = await self._store.list_runs(limit=page_size, before=before)
            yield found
            last = found[-1] if found else None
            if len(found) < page_size or last is None or last.created_at is None:
                return
            before = (last.created_at, last.id)

    async def archived_page(self, *, limit: int, before: Position | None = None,
                            agent: str | None = None) -> Page[RunRecord]:
        """Archived runs of the served agents (or of ``agent``) newest first, ``limit`` at
        most, after the page ending at ``before``."""
        agents = [agent] if agent else list(self._agents)
        return await read_page(
            lambda n, after: self._store.list_archived_runs(agents=agents, limit=n,
                                                            before=after), limit, before)
