"""The audit trail: who did what, from where, and how it ended (docs/guides/auth.md)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toren.core.audit import AuditEntry, AuditQuery, AuditRecord


class AuditStore(abc.ABC):
    """Entries of the audit trail, written once and never changed.

    The host's ``AuditLog`` (``runtime.audit``) calls ``record_audit`` for every
    state-changing call a surface takes (HTTP, the CLI on the database, MCP, chat buttons),
    ``list_audit`` for ``toren audit`` and ``GET /audit``, and ``forget_audit`` from the
    workers' retention loop (``TOREN_AUDIT_RETENTION``).
    """

    @abc.abstractmethod
    async def record_audit(self, entry: AuditEntry) -> AuditRecord:
        """Keep ``entry`` (already bounded: ``AuditEntry.bounded``); its record, with an id
        greater than every id recorded before it and ``at`` the database's clock."""

    @abc.abstractmethod
    async def list_audit(self, query: AuditQuery) -> list[AuditRecord]:
        """The entries matching every filter of ``query`` (``AuditQuery``: a checked one),
        newest (highest id) first, at most ``query.limit``, only ids below ``query.before``
        when it is set. ``actor`` matches an entry's actor id, its name, or
        ``<kind>:<id>``; ``action`` a whole action or the actions that start with it and a
        dot."""

    @abc.abstractmethod
    async def forget_audit(self, older_than_s: float) -> int:
        """Delete the entries recorded more than ``older_than_s`` seconds ago (by the
        database's clock); how many. Idempotent: every worker may call it."""
