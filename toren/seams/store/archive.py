"""The archive index: finished runs moved out of the hot tables, and where each one went."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from toren.core.events import Event
from toren.core.retention import ArchiveDigest
from toren.core.runs import RunRecord


class RunArchiveIndex(abc.ABC):
    """Choosing runs to archive, indexing them, purging them from the hot tables in small
    batches, and finding them afterwards.

    Called by the host's archive pass (``toren.host.services.archive``: the elected worker's
    maintenance loop, ``toren db archive``, ``POST /archive``) in this order per run:
    ``archivable_runs`` -> ``export_run`` -> (the backend stores the object) ->
    ``index_archived_run`` -> ``purge_archived_run``. A pass that dies between any two steps
    leaves the run readable: before the index row it is still hot; after it, reads go to the
    archive object, and the next pass finishes the purge (``unpurged_runs``).
    ``toren.testing.contracts.RunArchiveIndexContract`` checks each step.
    """

    @abc.abstractmethod
    def archive_lock(self) -> AbstractAsyncContextManager[bool]:
        """Hold the fleet-wide archive lock while the context is open; yields whether it was
        had (``False``: another pass, in this process or another, is archiving now; do
        nothing). The lock is let go when the context exits, by an exception too, and when
        its process dies (a crashed pass never blocks the next one)."""

    @abc.abstractmethod
    async def archivable_runs(self, agent: str, older_than_s: float, limit: int,
                              after: tuple[datetime, str] | None = None) -> list[RunRecord]:
        """Up to ``limit`` runs of ``agent``, by ``(finished_at, id)`` after ``after``, that
        ended more than
        ``older_than_s`` seconds ago (database clock) and that nothing refers to in
        ``agent``'s schema and the control schema: terminal, not indexed yet, no queue
        message, no unexpired lease, no live event stream following it, no pending
        approval, not the latest fire of an enabled schedule. Cross-agent relations
        (parents, children) are checked by the caller."""

    @abc.abstractmethod
    async def export_run(self, agent: str, run_id: str
                         ) -> tuple[RunRecord, list[Event], list[dict[str, Any]]] | None:
        """The run's row, every event (in ``RunReader.load_events`` order) and its tool
        manifests (as JSON), read in one snapshot; ``None`` if it is gone."""

    @abc.abstractmethod
    async def index_archived_run(self, agent: str, record: RunRecord, location: str,
                                 summary: dict[str, Any], events: int,
                                 digest: ArchiveDigest | None) -> bool:
        """Record that ``record`` is archived at ``location`` as the object ``digest``
        describes (``None`` only for an object written by a Toren that recorded none), if it
        is still terminal and still has exactly ``events`` events (else nothing is written and
        ``False`` returned: it changed since the export and the next pass archives it
        again). ``False`` too for a run indexed already (the first location stays)."""

    @abc.abstractmethod
    async def purge_archived_run(self, agent: str, run_id: str, batch_size: int) -> int:
        """Delete an indexed run's events ``batch_size`` at a time, each batch its own short
        transaction, then its row (tool manifests go with it); return the events deleted.
        Never deletes a run that is not in the index (0, the run untouched); 0 for a run
        purged already."""

    @abc.abstractmethod
    async def unpurged_runs(self, agent: str, limit: int) -> list[str]:
        """Indexed runs whose rows are still in the hot tables (a pass died mid-purge)."""

    @abc.abstractmethod
    async def archived_run(self, run_id: str,
                           agents: Sequence[str] | None = None) -> RunRecord | None:
        """An archived run's row as the index keeps it (``extra["archive"]``: location,
        archived_at, summary, sha256; ``extra["archive_digest"]``: the ``ArchiveDigest``
        recorded, or ``None``), looked up in ``agents``' schemas (every registered one if
        ``None``); ``None`` if not archived (hot runs included), whatever the form of
        ``run_id``."""

    @abc.abstractmethod
    async def list_archived_runs(self, *, agents: Sequence[str] | None = None,
                                 limit: int = 50,
                                 before: tuple[datetime, str] | None = None
                                 ) -> list[RunRecord]:
        """Archived runs, newest first (``created_at``, ``id``), with ``extra`` as
        ``archived_run`` gives it; ``before`` is the ``(created_at, id)`` of the previous
        page's last run. ``agents`` ``None``: every registered agent's; ``[]``: none."""

    @abc.abstractmethod
    async def restore_archived_run(self, agent: str, record: RunRecord,
                                   events: Sequence[Event],
                                   tool_manifests: Sequence[dict[str, Any]]) -> bool:
        """Put an archived run back into the hot tables as its archive object holds it (row,
        events, tool manifests) and drop its index row, in one transaction (replacing whatever
        a died purge left); ``False`` if the index has no such run; ``ArchiveMismatch``, with
        nothing written, if the database refuses a value (an event's ``(stream, seq)`` twice,
        say); ``RestoreConflict``, with nothing written, if the run's idempotency key is held
        by a hot run of the agent started since. Called by ``Runtime.restore_run``
        (``toren db restore``) once it has checked the object against the index."""

    @abc.abstractmethod
    async def hot_table_sizes(self, agents: Sequence[str]) -> dict[str, dict[str, int]]:
        """Per agent: rows and bytes (with indexes and TOAST) of its runs and events tables,
        as the database estimates them, under the keys ``runs_rows``, ``runs_bytes``,
        ``events_rows`` and ``events_bytes`` (a driver may add others); ``toren db archive
        --json`` reports them."""
