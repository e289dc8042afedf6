"""The archive of finished runs (docs/guides/retention.md): the elected worker's maintenance
loop, ``toren db archive``, ``POST /archive``, ``toren db restore`` and ``POST
/runs/{id}/restore`` call this service; ``Runtime.get_run``, ``Runtime.events``, the runs
service and sessions read archived runs through it, so an archived run reads as a hot one."""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from toren.agents import AgentSpec
from toren.config import Settings
from toren.core import events as ev
from toren.core.events import Event
from toren.core.retention import (
    ArchiveDigest,
    ArchivedRunData,
    ArchiveFormatError,
    archive_key,
    archive_summary,
    decode_archive,
    encode_archive_object,
)
from toren.core.runs import RunRecord
from toren.errors import (
    ArchiveMismatch,
    ArchiveNotConfigured,
    ArchiveUnavailable,
    ConfigError,
    RunNotFound,
)
from toren.host.retention import checked_archive, effective_retention, sha256_of
from toren.seams.archive import ArchiveBackend, archive_scheme
from toren.seams.drivers import driver_class
from toren.seams.store.archive import RunArchiveIndex
from toren.seams.store.reader import RunReader

log = logging.getLogger(__name__)

#: Runs read per page while looking for runs to archive.
ARCHIVE_PAGE = 100
#: Most archived runs one listing of the HTTP API returns.
MAX_ARCHIVED_PAGE = 200


class ArchiveService:
    """Archive passes over the served ``agents`` (each finished run past its agent's
    ``retention:`` written whole to the archive ``TOREN_ARCHIVE`` names, indexed, purged from
    the hot tables) and archived runs read back, listed and restored. ``runtime.archive``;
    needs the store open: its ``RunArchiveIndex`` and, to see whether a run is still referred
    to, its ``RunReader``. The archive backends it makes are closed by ``close``
    (``Runtime.stop``)."""

    def __init__(self, index: RunArchiveIndex, reader: RunReader,
                 agents: Mapping[str, AgentSpec], settings: Settings) -> None:
        self._index = index
        self._reader = reader
        self._agents = agents
        self._settings = settings
        self._backend: ArchiveBackend | None = None
        #: Backends made to read locations of another scheme than ``TOREN_ARCHIVE``'s.
        self._readers: dict[str, ArchiveBackend] = {}

    def backend(self) -> ArchiveBackend:
        """The backend ``TOREN_ARCHIVE`` names, made once; ``ArchiveNotConfigured`` if unset,
        ``DriverNotFound`` naming the distribution for a scheme none provides."""
        if self._backend is None:
            url = self._settings.archive_url
            if url is None:
                raise ArchiveNotConfigured()
            backend_class = driver_class("archive", archive_scheme(url))
            self._backend = backend_class(url, self._settings)
        return self._backend

    def retentions(self) -> dict[str, float]:
        """Served agent -> retention in seconds, for the agents whose runs are archived."""
        found = {}
        for name, spec in self._agents.items():
            age = effective_retention(spec, self._settings.default_retention_s)
            if age is not None:
                found[name] = age
        return found

    async def archive_due(self, *, dry_run: bool = False,
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
        if not self._agents:
            raise ConfigError("no agent is loaded: archive passes need the agent directories "
                              "(their retention:); pass --dir")
        backend = None if dry_run else self.backend()
        report: dict[str, Any] = {
            "dry_run": dry_run, "archive": backend.description if backend else
            self._settings.archive_url, "agents": {}, "runs": []}
        started = time.monotonic()
        async with self._index.archive_lock() as held:
            if not held:
                return report | {"skipped": "another process is archiving"}
            for agent in self._agents:
                age = retentions.get(agent)
                counts: dict[str, Any] = {"retention_s": age, "archived": 0, "events": 0,
                                          "bytes": 0, "skipped_referenced": 0,
                                          "resumed_purges": 0}
                report["agents"][agent] = counts
                if age is None:
                    continue
                if backend is not None:
                    for run_id in await self._index.unpurged_runs(agent, 1000):
                        await self._index.purge_archived_run(agent, run_id,
                                                             self._settings.archive_batch)
                        counts["resumed_purges"] += 1
                await self._archive_agent(agent, age, backend, counts, report["runs"],
                                          max_runs)
        report["duration_s"] = round(time.monotonic() - started, 3)
        return report

    async def _archive_agent(self, agent: str, age: float, backend: ArchiveBackend | None,
                             counts: dict[str, Any], runs: builtins.list[dict[str, Any]],
                             max_runs: int | None) -> None:
        after: tuple[datetime, str] | None = None
        while max_runs is None or len(runs) < max_runs:
            page = await self._index.archivable_runs(agent, age, ARCHIVE_PAGE, after)
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
            parent = await self._reader.get_run(record.parent_run_id, record.parent_agent)
            if parent is not None and parent.status not in ev.TERMINAL_STATUSES:
                return True
        children = await self._reader.child_runs(record.id)
        return any(child.status not in ev.TERMINAL_STATUSES for child in children)

    async def _archive_one(self, agent: str, run_id: str,
                           backend: ArchiveBackend) -> dict[str, Any] | None:
        exported = await self._index.export_run(agent, run_id)
        if exported is None:
            return None
        record, events, manifests = exported
        # compressing a long run takes a while: off the event loop, which serves live work
        encoded = await asyncio.to_thread(encode_archive_object, record, events, manifests)
        digest = encoded.digest
        try:
            # what every later read checks: refused here, the run stays hot and readable
            await asyncio.to_thread(decode_archive, encoded.data,
                                    max_content_bytes=digest.content_bytes)
        except ArchiveFormatError as exc:
            log.warning("run %s of %s is not archived: its archive would not read back (%s)",
                        run_id, agent, exc)
            return None
        location = await backend.put(archive_key(record), encoded.data)
        # read back what was stored before anything leaves the hot tables
        stored = await backend.get(location, max_bytes=digest.object_bytes)
        if await asyncio.to_thread(sha256_of, stored) != digest.sha256:
            raise ArchiveUnavailable(f"the archive of run {run_id} at {location} does not read "
                                     "back as written; nothing was deleted")
        summary = archive_summary(events) | {"bytes": digest.object_bytes}
        if not await self._index.index_archived_run(agent, record, location, summary,
                                                    len(events), digest):
            log.info("run %s changed while it was archived; the next pass takes it", run_id)
            return None
        await self._index.purge_archived_run(agent, run_id, self._settings.archive_batch)
        return {"location": location, "events": len(events), "bytes": digest.object_bytes}

    async def get(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        """An archived run's row from the archive index (``extra["archive"]``), looked up in
        ``agent``'s schema (every registered agent's if ``None``), or ``None``."""
        return await self._index.archived_run(run_id, [agent] if agent else None)

    def _backend_for(self, location: str) -> ArchiveBackend:
        """The backend that reads ``location``: ``TOREN_ARCHIVE``'s if it has the same scheme,
        else one made for the location itself, so runs archived before ``TOREN_ARCHIVE``
        changed (or with it unset, as for ``toren jobs show``) are still read."""
        scheme = archive_scheme(location)
        url = self._settings.archive_url
        if url is not None and archive_scheme(url) == scheme:
            return self.backend()
        if scheme not in self._readers:
            self._readers[scheme] = driver_class("archive", scheme)(location, self._settings)
        return self._readers[scheme]

    async def events(self, record: RunRecord) -> builtins.list[Event]:
        """Every event of an archived run, read back from its archive object (``read``'s
        checks)."""
        return (await self.read(record)).events

    async def read(self, record: RunRecord) -> ArchivedRunData:
        """The run in the archive object of ``record`` (an index row, ``get``), checked
        against what the index recorded when it was archived: the object's size and SHA-256,
        then its run (docs/guides/retention.md, "What binds an object to its run").
        ``ArchiveMismatch`` if anything differs, ``ArchiveUnavailable`` if it cannot be read.
        A run archived before digests were recorded is checked by what its index row holds
        (size, run, counts) and read at most ``TOREN_ARCHIVE_MAX_MB`` decompressed."""
        archive = record.extra["archive"]
        location = archive["location"]
        digest: ArchiveDigest | None = record.extra.get("archive_digest")
        cap = self._settings.archive_max_bytes
        recorded = (archive.get("summary") or {}).get("bytes")
        # the index's sizes are what was archived; the cap stands in for the ones it lacks
        max_object = digest.object_bytes if digest else (
            recorded if isinstance(recorded, int) and recorded > 0 else cap)
        data = await self._backend_for(location).get(location, max_bytes=max_object)
        try:
            return await asyncio.to_thread(checked_archive, data, record,
                                           digest.content_bytes if digest else cap)
        except ArchiveFormatError as exc:
            raise ArchiveMismatch(f"the archive of run {record.id} at {location} is damaged "
                                  f"or was changed since it was archived: {exc}; nothing was "
                                  "read from it") from exc

    async def list(self, *, agent: str | None = None, limit: int = 50,
                   before: tuple[datetime, str] | None = None) -> builtins.list[RunRecord]:
        """Archived runs, newest first, of ``agent`` (or of every agent this runtime serves;
        a runtime serving none, as the CLI's, sees every registered agent's)."""
        if not 1 <= limit <= 1000:
            raise ConfigError("limit must be between 1 and 1000")
        agents = [agent] if agent else (list(self._agents) or None)
        return await self._index.list_archived_runs(agents=agents, limit=limit, before=before)

    async def restore(self, run_id: str) -> RunRecord:
        """Put an archived run back into the hot tables, whole, from its archive object (the
        object stays where it is). ``RunNotFound`` if the run is not archived. A restored run
        older than its retention is archived again by the next pass."""
        record = await self.get(run_id)
        if record is None:
            raise RunNotFound(f"no archived run {run_id!r} in this database (see `toren jobs "
                              "list --archived`)")
        # every check before the first write: a refused object leaves the run as it was
        data = await self.read(record)
        restored = await self._index.restore_archived_run(record.agent, data.record,
                                                          data.events, data.tool_manifests)
        found = await self._reader.get_run(run_id, record.agent) if restored else None
        if found is None:
            raise RunNotFound(f"run {run_id!r} was restored meanwhile")
        return found

    async def close(self) -> None:
        """Let go of the archive backends' clients (``Runtime.stop``); safe to call twice."""
        backend, self._backend = self._backend, None
        readers, self._readers = self._readers, {}
        if backend is not None:
            await backend.close()
        for reader in readers.values():
            await reader.close()
