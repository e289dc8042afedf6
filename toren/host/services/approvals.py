"""Approvals: ``/approvals``, ``toren approvals``, the run and session pages' pending approvals
and the chat channels' approval buttons call this service."""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import Any

from toren.core.approvals import (
    APPROVAL_STATUSES,
    EXPIRED_BY,
    MAX_REASON_CHARS,
    ApprovalRecord,
    may_decide,
)
from toren.core.decisions import unstorable
from toren.errors import ApprovalAlreadyDecided, ApprovalNotFound, ConfigError, NotAnApprover
from toren.seams.store.approvals import ApprovalStore

#: Most approvals one listing returns.
MAX_APPROVALS_PAGE = 200


class ApprovalsService:
    """List, read and decide the tool calls that wait for a person, limited to the served
    ``agents`` (a runtime serving none, as the CLI's ``toren approvals`` uses, sees every
    agent's). ``runtime.approvals``; needs the store open."""

    def __init__(self, store: ApprovalStore, agents: Collection[str]) -> None:
        self._store = store
        self._agents = list(agents)

    def _scope(self) -> builtins.list[str] | None:
        return self._agents or None

    async def list(self, *, agent: str | None = None, run_id: str | None = None,
                   status: str | None = None, limit: int = 50
                   ) -> builtins.list[ApprovalRecord]:
        """Approvals of the served agents, newest request first (``status="pending"``: the
        ones waiting for a decision). ``ConfigError`` for an unknown status or agent."""
        if status is not None and status not in APPROVAL_STATUSES:
            raise ConfigError(f"unknown approval status {status!r}; one of "
                              f"{', '.join(APPROVAL_STATUSES)}")
        if agent is not None and self._agents and agent not in self._agents:
            raise ConfigError(f"agent {agent!r} is not served here; served agents: "
                              f"{', '.join(self._agents)}")
        if not 1 <= limit <= MAX_APPROVALS_PAGE:
            raise ConfigError(f"limit must be between 1 and {MAX_APPROVALS_PAGE}")
        return await self._store.list_approvals(agents=self._scope(), agent=agent,
                                                run_id=run_id, status=status, limit=limit)

    async def get(self, approval_id: str) -> ApprovalRecord:
        """One approval; ``ApprovalNotFound`` if none of a served agent has this id."""
        record = None if unstorable(approval_id) else await self._store.get_approval(approval_id)
        scope = self._scope()
        if record is None or (scope is not None and record.agent not in scope):
            raise ApprovalNotFound(f"no approval {approval_id!r} of an agent served here (see "
                                   "`toren approvals list`)")
        return record

    async def approve(self, approval_id: str, *, decided_by: str,
                      reason: str | None = None) -> ApprovalRecord:
        """Let the call run (exactly once); see ``decide``."""
        return await self.decide(approval_id, "approved", decided_by=decided_by, reason=reason)

    async def deny(self, approval_id: str, *, decided_by: str,
                   reason: str | None = None) -> ApprovalRecord:
        """Refuse the call; the model reads the refusal and ``reason`` as the tool's result."""
        return await self.decide(approval_id, "denied", decided_by=decided_by, reason=reason)

    async def decide(self, approval_id: str, outcome: str, *, decided_by: str,
                     reason: str | None = None) -> ApprovalRecord:
        """Decide a pending approval (``approved`` or ``denied``) as ``decided_by`` (an API
        key's name or ``cli:<os user>``), and wake its task; return the approval decided.

        Raises ``ApprovalNotFound``; ``NotAnApprover`` if the tool's ``approvers`` do not
        name ``decided_by``; ``ApprovalAlreadyDecided`` (with the first decision) if it was
        decided before, expired, or its run ended.
        """
        if outcome not in ("approved", "denied"):
            raise ConfigError(f"a decision is approved or denied, not {outcome!r}")
        if reason is not None and (not isinstance(reason, str) or unstorable(reason)):
            raise ConfigError("the reason must be text without NUL characters")
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            raise ConfigError(f"the reason may be at most {MAX_REASON_CHARS} characters; this "
                              f"one has {len(reason)}")
        record = await self.get(approval_id)
        if record.pending and not may_decide(record.approvers, decided_by):
            raise NotAnApprover(f"{decided_by} may not decide approval {record.id} of "
                                f"{record.tool}; its approvers: {', '.join(record.approvers)}")
        result = await self._store.decide_approval(record.id, outcome, decided_by, reason)
        assert result is not None
        record, decided = result
        if not decided and record.pending and record.extra.get("due"):
            result = await self._store.decide_approval(
                record.id, "expired", EXPIRED_BY, "nobody decided before its expiry")
            assert result is not None
            record = result[0]
        if not decided:
            by = f" by {record.decided_by}" if record.decided_by else ""
            raise ApprovalAlreadyDecided(
                f"approval {record.id} of {record.tool} was already decided: {record.status}"
                f"{by}{': ' + record.reason if record.reason else ''}",
                approval=record.to_json())
        return record

    async def pending(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """The run's approvals waiting for a decision, as JSON, oldest first
        (``GET /runs/{id}``, ``GET /sessions/{id}`` and ``toren chat`` show them)."""
        found = await self._store.list_approvals(agents=self._scope(), run_id=run_id,
                                                 status="pending", limit=MAX_APPROVALS_PAGE)
        return [record.to_json() for record in reversed(found)]
