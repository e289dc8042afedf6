"""The host API for retention: archive finished runs past their agent's ``retention:`` and read
archived runs back.

``toren.Runtime`` inherits ``RetentionApi``; the elected worker's maintenance loop
(``toren.host.worker``), ``toren db archive`` and ``POST /archive`` call ``archive_runs``;
``Runtime.get_run`` and ``Runtime.events`` fall back to ``archived_run``/``archived_events``,
so ``toren jobs show`` and the HTTP run routes read an archived run as they read a hot one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from toren.core import events as ev
from toren.core.events import Event
from toren.core.retention import (
    ArchiveFormatError,
    archive_key,
    archive_summary,
    decode_archive,
    encode_archive,
    parse_age,
)
from toren.core.runs import RunRecord
from toren.errors import ArchiveNotConfigured, ArchiveUnavailable, ConfigError, RunNotFound
from toren.seams.archive import ArchiveBackend, archive_scheme
from toren.seams.drivers import driver_class
from toren.seams.store import Store

if TYPE_CHECKING:
    from toren.agents import AgentSpec
    from toren.config import Settings

log = logging.getLogger(__name__)

#: Runs read per page while looking for runs to archive.
ARCHIVE_PAGE = 100
#: Most archived runs one listing returns.
MAX_ARCHIVED_PAGE = 200


def effective_retention(spec: AgentSpec, default_s: float | None) -> float | None:
    """Seconds after which the agent's finished runs are archived: its ``retention:``, else
    ``TOREN_RETENTION``; ``None``: never."""
    if spec.retention is None:
        return default_s
    return parse_age(spec.retention)


class RetentionApi:
    """Archive passes and archived runs on the runtime's store (see the module docstring)."""

    store: Store
    agents: dict[str, Any]
    settings: Settings
    _archive_backend: ArchiveBackend | None = None

    def archive_backend(self) -> ArchiveBackend:
        """The backend ``TOREN_ARCHIVE`` names, made once; ``ArchiveNotConfigured`` if unset,
        ``DriverNotFound`` naming the distribution for a scheme none provides."""
        if self._archive_backend is None:
            url = self.settings.archive_url
            if url is None:
                raise ArchiveNotConfigured()
            backend_class = driver_class("archive", archive_scheme(url))
            self._archive_backend = backend_class(url, self.settings)
        return self._archive_backend

    def retentions(self) -> dict[str, float]:
        """Served agent -> retention in seconds, for the agents whose runs are archived."""
        found = {}
        for name, spec in self.agents.items():
            age = effective_retention(spec, self.settings.default_retention_s)
            if age is not None:
                found[name] = age
        return found

    async def archive_runs(self, *, dry_run: bool = False,
                           max_runs: int | None = None) -> dict[str, Any]:
        """One archive pass over the served agents (docs/guides/retention.md).

        Each finished run older than its agent's retention that nothing refers to is written
        whole to the archive, indexed, and deleted from the hot tables in batches of
        ``TOREN_ARCHIVE_BATCH`` events (short transactions: live appends never wait for the
        pass). Only one pass runs at a time in the whole fleet (an advisory lock); a pass that
        finds the lock taken returns ``{"skipped": "another process is archiving"}``.
        ``dry_run`` only lists what would be archived. ``max_runs`` bounds the pass.

        Returns ``{"dry_run", "archive", "agents": {name: {...counts}}, "runs": [...]}``.
        """
        retentions = self.retentions()
        if not self.agents:
            raise ConfigError("no agent is loaded: archive passes need the agent directories "
                              "(their retention:); pass --dir")
        backend = None if dry_run else self.archive_backend()
        report: dict[str, Any] = {
            "dry_run": dry_run, "archive": backend.description if backend else
            self.settings.archive_url, "agents": {}, "runs": []}
        started = time.monotonic()
        async with self.store.archive_lock() as held:
            if not held:
                return report | {"skipped": "another process is archiving"}
            for agent in self.agents:
                age = retentions.get(agent)
                counts: dict[str, Any] = {"retention_s": age, "archived": 0, "events": 0,
                                          "bytes": 0, "skipped_referenced": 0,
                                          "resumed_purges": 0}
                report["agents"][agent] = counts
                if age is None:
                    continue
                if backend is not None:
                    for run_id in await self.store.unpurged_runs(agent, 1000):
                        await self.store.purge_archived_run(agent, run_id,
                                                            self.settings.archive_batch)
                        counts["resumed_purges"] += 1
                await self._archive_agent(agent, age, backend, counts, report["runs"],
                                          max_runs)
        report["duration_s"] = round(time.monotonic() - started, 3)
        return report

    async def _archive_agent(self, agent: str, age: float, backend: ArchiveBackend | None,
                             counts: dict[str, Any], runs: list[dict[str, Any]],
                             max_runs: int | None) -> None:
        after: tuple[datetime, str] | None = None
        while max_runs is None or len(runs) < max_runs:
            page = await self.store.archivable_runs(agent, age, ARCHIVE_PAGE, after)
            if not page:
                return
            last = page[-1]
            after = (last.finished_at, last.id) if last.finished_at else None
            for record in page:
                if max_runs is not None and len(runs) >= max_runs:
                    return
                if await self._referenced(record):
                    counts["skipped_referenced"] += 1
                    continue
                entry = {"id": record.id, "agent": agent, "status": record.status,
                         "finished_at": record.finished_at.isoformat()
                         if record.finished_at else None}
                if backend is not None:
                    archived = await self._archive_one(agent, record.id, backend)
                    if archived is None:
                        continue
                    entry |= archived
                    counts["events"] += archived["events"]
                    counts["bytes"] += archived["bytes"]
                counts["archived"] += 1
                runs.append(entry)
            if after is None:
                return

    async def _referenced(self, record: RunRecord) -> bool:
        """Whether a run of another agent still needs this one: a parent that is not finished
        (it waits for this child), or a child that is not (its end wakes this run)."""
        if record.parent_run_id is not None:
            parent = await self.store.get_run(record.parent_run_id, record.parent_agent)
            if parent is not None and parent.status not in ev.TERMINAL_STATUSES:
                return True
        children = await self.store.child_runs(record.id)
        return any(child.status not in ev.TERMINAL_STATUSES for child in children)

    async def _archive_one(self, agent: str, run_id: str,
                           backend: ArchiveBackend) -> dict[str, Any] | None:
        exported = await self.store.export_run(agent, run_id)
        if exported is None:
            return None
        record, events, manifests = exported
        # compressing a long run takes a while: off the event loop, which serves live work
        data = await asyncio.to_thread(encode_archive, record, events, manifests)
        location = await backend.put(archive_key(record), data)
        # read back what was stored before anything leaves the hot tables
        stored = await asyncio.to_thread(decode_archive, await backend.get(location))
        if stored.events != events:
            raise ArchiveUnavailable(f"the archive of run {run_id} at {location} does not read "
                                     "back as written; nothing was deleted")
        summary = archive_summary(events) | {"bytes": len(data)}
        if not await self.store.index_archived_run(agent, record, location, summary,
                                                   len(events)):
            log.info("run %s changed while it was archived; the next pass takes it", run_id)
            return None
        await self.store.purge_archived_run(agent, run_id, self.settings.archive_batch)
        return {"location": location, "events": len(events), "bytes": len(data)}

    async def archived_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        """An archived run's row from the archive index (``extra["archive"]``), looked up in
        ``agent``'s schema (every registered agent's if ``None``), or ``None``."""
        return await self.store.archived_run(run_id, [agent] if agent else None)

    def _backend_for(self, location: str) -> ArchiveBackend:
        """The backend that reads ``location``: ``TOREN_ARCHIVE``'s if it has the same scheme,
        else one made for the location itself, so runs archived before ``TOREN_ARCHIVE``
        changed (or with it unset, as for ``toren jobs show``) are still read."""
        scheme = archive_scheme(location)
        url = self.settings.archive_url
        if url is not None and archive_scheme(url) == scheme:
            return self.archive_backend()
        readers = self.__dict__.setdefault("_archive_readers", {})
        if scheme not in readers:
            readers[scheme] = driver_class("archive", scheme)(location, self.settings)
        reader: ArchiveBackend = readers[scheme]
        return reader

    async def archived_events(self, record: RunRecord) -> list[Event]:
        """Every event of an archived run, read back from its archive object."""
        location = record.extra["archive"]["location"]
        try:
            data = await self._backend_for(location).get(location)
            return (await asyncio.to_thread(decode_archive, data)).events
        except ArchiveFormatError as exc:
            raise ArchiveUnavailable(f"the archive of run {record.id} at {location} is "
                                     f"damaged: {exc}") from exc

    async def list_archived_runs(self, *, agent: str | None = None, limit: int = 50,
                                 before: tuple[datetime, str] | None = None
                                 ) -> list[RunRecord]:
        """Archived runs, newest first, of ``agent`` (or of every agent this runtime serves;
        a runtime serving none, as the CLI's, sees every registered agent's)."""
        if not 1 <= limit <= 1000:
            raise ConfigError("limit must be between 1 and 1000")
        agents = [agent] if agent else (list(self.agents) or None)
        return await self.store.list_archived_runs(agents=agents, limit=limit, before=before)

    async def restore_run(self, run_id: str) -> RunRecord:
        """Put an archived run back into the hot tables, whole, from its archive object (the
        object stays where it is). ``RunNotFound`` if the run is not archived. A restored run
        older than its retention is archived again by the next pass."""
        record = await self.archived_run(run_id)
        if record is None:
            raise RunNotFound(f"no archived run {run_id!r} in this database (see `toren jobs "
                              "list --archived`)")
        location = record.extra["archive"]["location"]
        try:
            data = await asyncio.to_thread(decode_archive,
                                           await self._backend_for(location).get(location))
        except ArchiveFormatError as exc:
            raise ArchiveUnavailable(f"the archive of run {run_id} at {location} is "
                                     f"damaged: {exc}") from exc
        restored = await self.store.restore_archived_run(record.agent, data.record,
                                                         data.events, data.tool_manifests)
        if not restored:
            raise RunNotFound(f"run {run_id!r} was restored meanwhile")
        found = await self.store.get_run(run_id, record.agent)
        assert found is not None
        return found

    async def close_archive(self) -> None:
        """Let go of the archive backend's clients (``Runtime.stop``)."""
        if self._archive_backend is not None:
            await self._archive_backend.close()
            self._archive_backend = None
        for reader in self.__dict__.pop("_archive_readers", {}).values():
            await reader.close()


def is_archived(record: RunRecord) -> bool:
    """Whether ``record`` was read from the archive index."""
    return "archive" in record.extra
