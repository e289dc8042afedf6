"""The host API for retention: archive finished runs past their agent's ``retention:`` and read
archived runs back.

``toren.Runtime`` inherits ``RetentionApi``; the elected worker's maintenance loop
(``toren.host.worker``), ``toren db archive`` and ``POST /archive`` call ``archive_runs``;
``Runtime.get_run`` and ``Runtime.events`` fall back to ``archived_run``/``archived_events``,
so ``toren jobs show`` and the HTTP run routes read an archived run as they read a hot one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

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
    parse_age,
    run_row,
)
from toren.core.runs import RunRecord
from toren.errors import (
    ArchiveMismatch,
    ArchiveNotConfigured,
    ArchiveUnavailable,
    ConfigError,
    RunNotFound,
)
from toren.seams.archive import ArchiveBackend, archive_scheme
from toren.seams.drivers import driver_class
from toren.seams.store import RunReader, Store

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
        if await asyncio.to_thread(_sha256, stored) != digest.sha256:
            raise ArchiveUnavailable(f"the archive of run {run_id} at {location} does not read "
                                     "back as written; nothing was deleted")
        summary = archive_summary(events) | {"bytes": digest.object_bytes}
        if not await self.store.index_archived_run(agent, record, location, summary,
                                                   len(events), digest):
            log.info("run %s changed while it was archived; the next pass takes it", run_id)
            return None
        await self.store.purge_archived_run(agent, run_id, self.settings.archive_batch)
        return {"location": location, "events": len(events), "bytes": digest.object_bytes}

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
        """Every event of an archived run, read back from its archive object
        (``read_archived_run``'s checks)."""
        return (await self.read_archived_run(record)).events

    async def read_archived_run(self, record: RunRecord) -> ArchivedRunData:
        """The run in the archive object of ``record`` (an index row, ``archived_run``),
        checked against what the index recorded when it was archived: the object's size and
        SHA-256, then its run (docs/guides/retention.md, "What binds an object to its run").
        ``ArchiveMismatch`` if anything differs, ``ArchiveUnavailable`` if it cannot be read.
        A run archived before digests were recorded is checked by what its index row holds
        (size, run, counts) and read at most ``TOREN_ARCHIVE_MAX_MB`` decompressed."""
        archive = record.extra["archive"]
        location = archive["location"]
        digest: ArchiveDigest | None = record.extra.get("archive_digest")
        cap = self.settings.archive_max_bytes
        recorded = (archive.get("summary") or {}).get("bytes")
        # the index's sizes are what was archived; the cap stands in for the ones it lacks
        max_object = digest.object_bytes if digest else (
            recorded if isinstance(recorded, int) and recorded > 0 else cap)
        data = await self._backend_for(location).get(location, max_bytes=max_object)
        try:
            return await asyncio.to_thread(_checked_archive, data, record,
                                           digest.content_bytes if digest else cap)
        except ArchiveFormatError as exc:
            raise ArchiveMismatch(f"the archive of run {record.id} at {location} is damaged "
                                  f"or was changed since it was archived: {exc}; nothing was "
                                  "read from it") from exc

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
        # every check before the first write: a refused object leaves the run as it was
        data = await self.read_archived_run(record)
        restored = await self.store.restore_archived_run(record.agent, data.record,
                                                         data.events, data.tool_manifests)
        found = await self.store.get_run(run_id, record.agent) if restored else None
        if found is None:
            raise RunNotFound(f"run {run_id!r} was restored meanwhile")
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


#: The summary counts an index row keeps that the object's events must give again.
_SUMMARY_COUNTS = ("events", "model_calls", "tool_calls", "input_tokens", "output_tokens",
                   "cost_usd")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _checked_archive(data: bytes, record: RunRecord, max_content_bytes: int) -> ArchivedRunData:
    """The run in ``data`` if it is the object the index row ``record`` describes (in a thread:
    hashing and decompressing take a while); ``ArchiveFormatError`` saying how it differs."""
    digest: ArchiveDigest | None = record.extra.get("archive_digest")
    archive = record.extra["archive"]
    if digest is not None:
        actual = _sha256(data)
        if len(data) != digest.object_bytes or actual != digest.sha256:
            raise ArchiveFormatError(f"it holds {len(data)} bytes of SHA-256 {actual}, not the "
                                     f"{digest.object_bytes} bytes of SHA-256 {digest.sha256} "
                                     "recorded when it was archived")
    else:
        recorded = (archive.get("summary") or {}).get("bytes")
        if isinstance(recorded, int) and len(data) != recorded:
            raise ArchiveFormatError(f"it holds {len(data)} bytes, not the {recorded} recorded "
                                     "when it was archived")
    decoded = decode_archive(data, max_content_bytes=max_content_bytes)
    if decoded.record.id != record.id or decoded.record.agent != record.agent:
        raise ArchiveFormatError(f"it holds run {decoded.record.id} of agent "
                                 f"{decoded.record.agent!r}, not run {record.id} of "
                                 f"{record.agent!r}")
    indexed, held = run_row(record), run_row(decoded.record)
    changed = sorted(name for name in indexed if indexed[name] != held[name])
    if changed:
        raise ArchiveFormatError(f"its run row differs from the index's in {', '.join(changed)}")
    if digest is None:
        summary = archive.get("summary") or {}
        try:
            counted = archive_summary(decoded.events)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ArchiveFormatError(f"its model calls are malformed: {exc}") from exc
        changed = sorted(name for name in _SUMMARY_COUNTS
                         if name in summary and summary[name] != counted[name])
        if changed:
            raise ArchiveFormatError(f"its events differ from the index's summary in "
                                     f"{', '.join(changed)}")
    return dataclasses.replace(decoded, record=dataclasses.replace(decoded.record,
                                                                   extra=record.extra))


class ArchivedRunReader(RunReader):
    """A ``RunReader`` over one archived run, for the live event stream (SSE) of
    ``GET /runs/{id}/events``: it replays the archived events and ends, as for any finished
    run. Everything but the run itself is ``store``'s.

    ``events`` are the run's archived events, read and checked once before the stream starts
    (``RetentionApi.archived_events``), so that an object that is not what was archived is a
    409 before any response is started."""

    def __init__(self, store: RunReader, record: RunRecord, events: list[Event]) -> None:
        self.store = store
        self.record = record
        self.events = events

    async def get_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        return self.record if run_id == self.record.id else await self.store.get_run(
            run_id, agent)

    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, agents: Sequence[str] | None = None,
                        before: tuple[datetime, str] | None = None,
                        kind: str | None = None, schedule: str | None = None
                        ) -> list[RunRecord]:
        return await self.store.list_runs(agent=agent, status=status, limit=limit,
                                                  agents=agents, before=before, kind=kind,
                                                  schedule=schedule)

    async def child_runs(self, run_id: str) -> list[RunRecord]:
        return await self.store.child_runs(run_id)

    async def load_events(self, agent: str, run_id: str,
                          after: Mapping[str, int] | None = None) -> list[Event]:
        position = dict(after or {})
        return [e for e in self.events if e.seq > position.get(e.stream, 0)]

    async def load_stream(self, agent: str, run_id: str, stream: str) -> list[Event]:
        return [e for e in self.events if e.stream == stream]
