"""Approvals: ``/approvals``, ``toren approvals``, the run and session pages' pending approvals
and the chat channels' approval buttons call this service."""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import Any

from toren.core.actors import Actor, actor_of_label
from toren.core.approvals import (
    APPROVAL_STATUSES,
    EXPIRED_BY,
    ApprovalRecord,
    may_decide,
)
from toren.core.decisions import unstorable
from toren.errors import (
    ApprovalAlreadyDecided,
    ApprovalNotFound,
    ApprovalStale,
    ConfigError,
    NotAnApprover,
)
from toren.host.services.approval_checks import check_arguments, check_decision
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

    async def approve(self, approval_id: str, *, decided_by: str, reason: str | None = None,
                      digest: str | None = None, scope: str = "call") -> ApprovalRecord:
        """Let the call run (exactly once; ``scope="run"``: and every later call of the same
        tool with the same arguments in the run, without asking); see ``decide``."""
        return await self.decide(approval_id, "approved", decided_by=decided_by, reason=reason,
                                 digest=digest, scope=scope)

    async def deny(self, approval_id: str, *, decided_by: str, reason: str | None = None,
                   digest: str | None = None) -> ApprovalRecord:
        """Refuse the call; the model reads the refusal and ``reason`` as the tool's result."""
        return await self.decide(approval_id, "denied", decided_by=decided_by, reason=reason,
                                 digest=digest)

    async def edit(self, approval_id: str, arguments: dict[str, Any], *, decided_by: str,
                   digest: str, reason: str | None = None) -> ApprovalRecord:
        """Let the call run with ``arguments`` instead (checked against the tool's schema);
        the edit is the approval of the edited call. See ``decide``."""
        return await self.decide(approval_id, "edited", decided_by=decided_by, reason=reason,
                                 digest=digest, arguments=arguments)

    async def answer(self, approval_id: str, answer: str, *, decided_by: str, digest: str,
                     reason: str | None = None) -> ApprovalRecord:
        """Give the call's result instead of running the tool (it never runs). See
        ``decide``."""
        return await self.decide(approval_id, "answered", decided_by=decided_by, reason=reason,
                                 digest=digest, answer=answer)

    async def decide(self, approval_id: str, outcome: str, *, decided_by: str | Actor,
                     reason: str | None = None, digest: str | None = None,
                     scope: str = "call", arguments: dict[str, Any] | None = None,
                     answer: str | None = None) -> ApprovalRecord:
        """Decide a pending approval as ``decided_by`` (an ``Actor``: an API key over HTTP;
        or the label of one that is no key: ``cli:<user>``, ``telegram:<id>``), and wake its
        task; return the approval decided (``decided_by`` shows ``Actor.label``).

        ``outcome``: ``approved``, ``denied``, ``edited`` (with ``arguments``) or ``answered``
        (with ``answer``). ``digest``: the digest of the arguments the decider saw; checked
        when given (every surface sends it; HTTP requires it for edit and answer).
        ``scope``: ``call``, or ``run`` with ``approved`` (approve always).

        Raises ``ApprovalNotFound``; ``ConfigError`` for a malformed decision;
        ``InvalidApprovalArguments`` if edited arguments do not match the tool's schema;
        ``NotAnApprover`` if the approval's approvers do not name ``decided_by``;
        ``ApprovalStale`` if ``digest`` is not the approval's; ``ApprovalAlreadyDecided``
        (with the first decision) if it was decided before, expired, or its run ended.
        """
        check_decision(outcome, reason=reason, digest=digest, scope=scope,
                       arguments=arguments, answer=answer)
        record = await self.get(approval_id)
        actor = decided_by if isinstance(decided_by, Actor) else actor_of_label(decided_by)
        decided_by = actor.label
        if record.pending and not may_decide(record.approvers, actor):
            raise NotAnApprover(f"{decided_by} may not decide approval {record.id} of "
                                f"{record.tool}; its approvers: {', '.join(record.approvers)} "
                                "(key:<id or prefix>, role:<role>, cli:<user>)")
        if record.pending and digest is not None and digest != record.digest:
            raise ApprovalStale(
                f"approval {record.id} of {record.tool} is for arguments with digest "
                f"{record.digest}, not {digest}: read it again (toren approvals show "
                f"{record.id}) and decide on what it shows", digest=record.digest,
                approval=record.to_json())
        if outcome == "edited" and record.pending:
            assert arguments is not None
            check_arguments(record, arguments)
        result = await self._store.decide_approval(record.id, outcome, decided_by, reason,
                                                   scope=scope, arguments=arguments,
                                                   answer=answer)
        assert result is not None
        record, decided = result
        if not decided and record.pending and record.extra.get("due"):
            if record.escalates:
                escalated = await self._store.escalate_approval(record.id)
                raise ApprovalAlreadyDecided(
                    f"approval {record.id} of {record.tool} expired before this decision and "
                    "moved to its second approvers "
                    f"({', '.join(record.escalate_to)}); they decide now",
                    approval=(escalated or record).to_json())
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
