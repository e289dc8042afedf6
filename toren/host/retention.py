"""Retention's pieces: which agents' runs are archived and after how long, whether a run row
came from the archive index, the check binding an archive object to its run, and the
``RunReader`` over one archived run.

The archive pass and the reads of archived runs are ``runtime.archive``
(``toren.host.services.archive.ArchiveService``): the elected worker's maintenance loop
(``toren.host.worker``), ``toren db archive`` and ``POST /archive`` run passes;
``Runtime.get_run`` and ``Runtime.events`` fall back to the archive, so ``toren jobs show`` and
the HTTP run routes read an archived run as they read a hot one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from toren.core.costs import ModelCosts, Period
from toren.core.events import Event
from toren.core.retention import (
    ArchiveDigest,
    ArchivedRunData,
    ArchiveFormatError,
    archive_summary,
    decode_archive,
    parse_age,
    run_row,
)
from toren.core.runs import RunRecord
from toren.seams.store import RunReader

if TYPE_CHECKING:
    from toren.agents import AgentSpec


def effective_retention(spec: AgentSpec, default_s: float | None) -> float | None:
    """Seconds after which the agent's finished runs are archived: its ``retention:``, else
    ``TOREN_RETENTION``; ``None``: never."""
    if spec.retention is None:
        return default_s
    return parse_age(spec.retention)


def is_archived(record: RunRecord) -> bool:
    """Whether ``record`` was read from the archive index."""
    return "archive" in record.extra


#: The summary counts an index row keeps that the object's events must give again.
_SUMMARY_COUNTS = ("events", "model_calls", "tool_calls", "input_tokens", "output_tokens",
                   "cost_usd")


def sha256_of(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex (an archive object's digest)."""
    return hashlib.sha256(data).hexdigest()


def checked_archive(data: bytes, record: RunRecord, max_content_bytes: int) -> ArchivedRunData:
    """The run in ``data`` if it is the object the index row ``record`` describes (in a thread:
    hashing and decompressing take a while); ``ArchiveFormatError`` saying how it differs."""
    digest: ArchiveDigest | None = record.extra.get("archive_digest")
    archive = record.extra["archive"]
    if digest is not None:
        actual = sha256_of(data)
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
    (``ArchiveService.events``), so that an object that is not what was archived is a
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

    async def fork_runs(self, agent: str, run_id: str) -> list[RunRecord]:
        return await self.store.fork_runs(agent, run_id)

    async def costs(self, agents: Sequence[str], since: datetime, until: datetime,
                    period: Period) -> list[ModelCosts]:
        return await self.store.costs(agents, since, until, period)

    async def load_events(self, agent: str, run_id: str,
                          after: Mapping[str, int] | None = None) -> list[Event]:
        position = dict(after or {})
        return [e for e in self.events if e.seq > position.get(e.stream, 0)]

    async def load_stream(self, agent: str, run_id: str, stream: str) -> list[Event]:
        return [e for e in self.events if e.stream == stream]
