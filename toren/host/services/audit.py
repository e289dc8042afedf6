"""The audit trail (``runtime.audit``): every surface records its state-changing calls here,
and ``toren audit`` and ``GET /audit`` read them back (docs/guides/auth.md)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from toren.core.actors import Actor
from toren.core.audit import OK, AuditEntry, AuditQuery, AuditRecord
from toren.core.errors import TorenError
from toren.seams.store.audit import AuditStore

log = logging.getLogger(__name__)


def error_outcome(exc: BaseException) -> str:
    """The outcome an entry records for a call that raised ``exc``: its code."""
    return exc.code if isinstance(exc, TorenError) else "internal_error"


@dataclass
class AuditNote:
    """What a call adds to its entry while it runs (``AuditLog.recording``): what it acted
    on, once known (the run it started), and details."""

    agent: str | None = None
    run_id: str | None = None
    target: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditPage:
    """Entries, newest first, and ``before``: the cursor of the next page (``None`` on the
    last)."""

    items: list[AuditRecord]
    before: int | None


class AuditLog:
    """Records and reads the audit trail. ``runtime.audit``.

    A write that fails is logged at ERROR (``toren.host.services.audit``) and does not undo
    or fail the call it records: the action is done by then, and an error would make a
    client retry what succeeded. Reads and deletes raise as the store does.
    """

    def __init__(self, store: AuditStore) -> None:
        self._store = store

    async def record(self, entry: AuditEntry) -> AuditRecord | None:
        """Keep ``entry`` (bounded: ``AuditEntry.bounded``); its record, or ``None`` when
        the write failed (logged)."""
        bounded = entry.bounded()
        try:
            return await self._store.record_audit(bounded)
        except Exception as exc:  # the action is done: say so loudly, do not fail it
            log.error("AUDIT WRITE FAILED: %s by %s:%s (%s) on %s was not recorded: %s",
                      bounded.action, bounded.actor_kind, bounded.actor_id, bounded.outcome,
                      bounded.run_id or bounded.target or bounded.agent or "-",
                      exc or type(exc).__name__)
            return None

    @asynccontextmanager
    async def recording(self, actor: Actor, action: str, source: str,
                        **fields: Any) -> AsyncIterator[AuditNote]:
        """Record the call in the ``async with`` block when it ends: ``ok``, or the code of
        what it raised (re-raised). The block may fill the ``AuditNote`` it is given."""
        note = AuditNote(agent=fields.pop("agent", None), run_id=fields.pop("run_id", None),
                         target=fields.pop("target", None),
                         details=dict(fields.pop("details", None) or {}))
        outcome = OK
        try:
            yield note
        except BaseException as exc:
            outcome = error_outcome(exc)
            raise
        finally:
            await self.record(AuditEntry.of(
                actor, action, source, agent=note.agent, run_id=note.run_id,
                target=note.target, details=note.details, outcome=outcome, **fields))

    async def page(self, query: AuditQuery) -> AuditPage:
        """One page of entries matching ``query`` (checked first: ``InvalidAuditQuery``)."""
        checked = query.checked()
        found = await self._store.list_audit(replace(checked, limit=checked.limit + 1))
        items = found[:checked.limit]
        more = len(found) > checked.limit and items
        return AuditPage(items, items[-1].id if more else None)

    async def forget(self, older_than_s: float) -> int:
        """Delete entries recorded more than ``older_than_s`` seconds ago; how many."""
        return await self._store.forget_audit(older_than_s)

