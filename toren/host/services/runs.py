"""Runs in pages, and where a run's events are read from: ``GET /runs``, ``GET /archive``,
the live event stream and ``toren jobs`` call this service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toren.core.events import Event
from toren.core.runs import RunRecord, RunSearch, RunTotals
from toren.host.retention import ArchivedRunReader, is_archived
from toren.host.services.pages import Page, Position, read_page
from toren.seams.store import Store
from toren.seams.store.reader import RunReader


@dataclass(frozen=True)
class RunsPage:
    """A page of runs (``RunsService.search``), each run's totals (absent: no model calls),
    and where the next page starts: ``after`` (newest first) or ``next_offset`` (any other
    order); both ``None`` on the last page."""

    items: list[RunRecord]
    totals: dict[str, RunTotals]
    after: Position | None
    next_offset: int | None


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

    async def search(self, search: RunSearch) -> RunsPage:
        """One page of the runs ``search`` finds among the served agents (or its agents),
        with each run's totals. A newest-first list without words, version or dates is read
        with ``list_runs``; any other with ``RunReader.search_runs`` (``NotImplementedError``
        from a store that cannot search). Newest-first pages go on from the last run's
        ``(created_at, id)`` (``before``), other sorts from an offset."""
        agents = search.agents or tuple(self._agents)
        plain = (search.sort == "created" and search.descending and not search.offset
                 and not (search.text or search.version or search.since or search.until))
        if plain:
            agent = search.agents[0] if len(search.agents) == 1 else None
            found = await self.page(limit=search.limit, before=search.before, agent=agent,
                                    status=search.status, kind=search.kind,
                                    schedule=search.schedule)
            items, after, next_offset = found.items, found.after, None
        else:
            rows = await self._store.search_runs(
                replace(search, agents=agents, limit=search.limit + 1))
            items = rows[:search.limit]
            more = len(rows) > search.limit and bool(items)
            keyset = search.sort == "created" and search.descending and not search.offset
            last = items[-1] if items else None
            after = ((last.created_at, last.id) if more and keyset and last is not None
                     and last.created_at is not None else None)
            next_offset = search.offset + len(items) if more and not keyset else None
        return RunsPage(items, await self.totals(items), after, next_offset)

    async def totals(self, records: Sequence[RunRecord]) -> dict[str, RunTotals]:
        """Each run's ``RunTotals`` (``RunReader.run_totals``, one read per agent); runs
        without model calls are absent."""
        by_agent: dict[str, list[str]] = {}
        for record in records:
            by_agent.setdefault(record.agent, []).append(record.id)
        found: dict[str, RunTotals] = {}
        for agent, run_ids in by_agent.items():
            found.update(await self._store.run_totals(agent, run_ids))
        return found

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
