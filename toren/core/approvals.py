"""Approvals: who may let a tool call run, and what a decision looks like (pure: no I/O).

A tool needs approval when agent.yaml's ``approvals:`` names it or its function is decorated
with ``@tool(requires_approval=True)``. The task records ``ApprovalRequested`` instead of
running the call and parks as ``awaiting_approval``; the decision is made once, in the store's
approvals table, by the API or the CLI (``toren.host.runtime.Runtime.decide_approval``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

#: An approval's status: ``pending`` until it is decided, then one of the outcomes.
ApprovalStatus = Literal["pending", "approved", "denied", "expired", "cancelled"]
APPROVAL_STATUSES: tuple[str, ...] = ("pending", "approved", "denied", "expired", "cancelled")
#: Who records an expiry.
EXPIRED_BY = "toren"
#: Longest reason kept with a decision, in characters.
MAX_REASON_CHARS = 2000
_NAMESPACE = uuid.UUID("6f1c7a52-2b7e-4b8e-9a53-3c1f0e8a9d41")


def approval_id(idempotency_key: str) -> str:
    """The approval's id: a UUID derived from the tool call's idempotency key, so a worker
    that records the request again after a crash names the same approval."""
    return str(uuid.uuid5(_NAMESPACE, idempotency_key))


@dataclass(frozen=True)
class ApprovalPolicy:
    """What agent.yaml's ``approvals: {TOOL: {...}}`` (or ``requires_approval=True``) says.

    ``approvers`` empty: anyone who may use the API or the CLI may decide.
    ``expires_after_s`` ``None``: the request waits until someone decides.
    """

    approvers: tuple[str, ...] = ()
    expires_after_s: float | None = None

    @classmethod
    def from_yaml(cls, data: dict[str, Any] | None) -> ApprovalPolicy:
        data = data or {}
        return cls(approvers=tuple(data.get("approvers", ())),
                   expires_after_s=data.get("expiresAfterSeconds"))

    def to_json(self) -> dict[str, Any]:
        return {"approvers": list(self.approvers), "expiresAfterSeconds": self.expires_after_s}


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval as the store keeps it (``GET /approvals/{id}``, ``toren approvals show``)."""

    id: str
    agent: str
    run_id: str
    task_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    status: str
    approvers: tuple[str, ...] = ()
    requested_at: datetime | None = None
    expires_at: datetime | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "agent": self.agent, "run_id": self.run_id, "task_id": self.task_id,
            "call_id": self.call_id, "tool": self.tool, "arguments": self.arguments,
            "status": self.status, "approvers": list(self.approvers),
            "requested_at": _iso(self.requested_at), "expires_at": _iso(self.expires_at),
            "decided_by": self.decided_by, "decided_at": _iso(self.decided_at),
            "reason": self.reason,
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def may_decide(approvers: tuple[str, ...] | list[str], who: str) -> bool:
    """Whether ``who`` (an API key's name or ``cli:<os user>``) may decide."""
    return not approvers or who in approvers


def decision_text(tool: str, outcome: str, decided_by: str, reason: str | None) -> str:
    """The tool result the model reads for a call that was denied or expired."""
    because = f": {reason}" if reason else ""
    if outcome == "expired":
        return (f"Error: the call to {tool} was not run: its approval expired before anyone "
                f"decided{because}.")
    return f"Error: the call to {tool} was not run: {decided_by} denied it{because}."


def waiting_text(tool: str, approval: str) -> str:
    """What a receipt and ``toren chat`` say while a task is parked."""
    return f"waiting for approval of {tool} (id {approval})"
