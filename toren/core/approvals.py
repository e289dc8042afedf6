"""Approvals: who may let a tool call run, and what a decision looks like (pure: no I/O).

A tool needs approval when agent.yaml's ``approvals:`` names it or its function is decorated
with ``@tool(requires_approval=True)``. The task records ``ApprovalRequested`` instead of
running the call and parks as ``awaiting_approval``; the decision is made once, in the store's
approvals table, by the API or the CLI (``toren.host.runtime.Runtime.decide_approval``).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from toren.core import actors
from toren.core.actors import Actor, actor_of_label

#: An approval's status: ``pending`` until it is decided, then one of the outcomes.
ApprovalStatus = Literal["pending", "approved", "denied", "edited", "answered", "expired",
                         "cancelled"]
APPROVAL_STATUSES: tuple[str, ...] = ("pending", "approved", "denied", "edited", "answered",
                                      "expired", "cancelled")
#: What a person may decide: let the call run, refuse it, let it run with other arguments, or
#: give its result instead of running it.
DECISIONS: tuple[str, ...] = ("approved", "denied", "edited", "answered")
#: How far a decision reaches: this call, or (approvals only) every later call of the same
#: tool with the same arguments in the same run ("approve always").
SCOPES: tuple[str, ...] = ("call", "run")
#: What happens when nobody decided before the expiry.
ON_EXPIRY: tuple[str, ...] = ("deny", "escalate")
#: Who records an expiry.
EXPIRED_BY = "toren"
#: Longest reason kept with a decision, in characters.
MAX_REASON_CHARS = 2000
#: Longest answer a person may give instead of running the tool, in characters.
MAX_ANSWER_CHARS = 100_000
#: Largest edited arguments, in bytes of JSON.
MAX_EDITED_ARGUMENTS_BYTES = 256_000
_NAMESPACE = uuid.UUID("6f1c7a52-2b7e-4b8e-9a53-3c1f0e8a9d41")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``30m``, ``1h30m``, ``45s`` or ``2d`` (agent.yaml's
    ``expiresAfter`` and ``remindAfter``); ``ValueError`` saying the form otherwise."""
    parts = _DURATION.findall(text) if isinstance(text, str) else []
    if not parts or "".join(n + u for n, u in parts) != text or \
            (seconds := sum(float(n) * _UNIT_S[u] for n, u in parts)) <= 0:
        raise ValueError(f"{text!r} is not a duration: write a number and a unit, such as "
                         "30m, 1h30m, 45s or 2d")
    return seconds


def arguments_digest(arguments: dict[str, Any]) -> str:
    """The digest a decision is bound to: sha256 (hex) of the arguments as canonical JSON
    (sorted keys, no spaces, UTF-8). Recorded with each ``ApprovalRequested``, shown by every
    surface, and sent back with a decision, so nobody approves arguments they did not see."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def approval_id(idempotency_key: str) -> str:
    """The approval's id: a UUID derived from the tool call's idempotency key, so a worker
    that records the request again after a crash names the same approval."""
    return str(uuid.uuid5(_NAMESPACE, idempotency_key))


@dataclass(frozen=True)
class ApprovalPolicy:
    """What agent.yaml's ``approvals: {TOOL: {...}}`` (or ``requires_approval=True``) says.

    ``approvers`` empty: anyone who may use the API or the CLI may decide.
    ``expires_after_s`` ``None``: the request waits until someone decides.
    ``on_expiry``: ``deny`` (the model is told it expired) or ``escalate`` (once: the approval
    moves to ``escalate_to`` with a new expiry of the same length; if that passes too, it
    expires). ``remind_after_s``: a reminder notice goes to the session's channel this long
    after the request (and after an escalation) while nobody decided.
    """

    approvers: tuple[str, ...] = ()
    expires_after_s: float | None = None
    on_expiry: str = "deny"
    escalate_to: tuple[str, ...] = ()
    remind_after_s: float | None = None

    @classmethod
    def from_yaml(cls, data: dict[str, Any] | None) -> ApprovalPolicy:
        """The policy of one ``approvals:`` entry (already valid by agent.schema.json);
        ``ValueError`` for a bad duration or an escalation without its approvers."""
        data = data or {}
        expires = data.get("expiresAfterSeconds")
        if data.get("expiresAfter") is not None and expires is not None:
            raise ValueError("give expiresAfter or expiresAfterSeconds, not both")
        if data.get("expiresAfter") is not None:
            expires = parse_duration(data["expiresAfter"])
        remind = data.get("remindAfter")
        policy = cls(approvers=_approvers(data, "approvers"), expires_after_s=expires,
                     on_expiry=data.get("onExpiry", "deny"),
                     escalate_to=_approvers(data, "escalateTo"),
                     remind_after_s=parse_duration(remind) if remind is not None else None)
        if policy.on_expiry == "escalate" and (not policy.escalate_to or expires is None):
            raise ValueError("onExpiry: escalate needs escalateTo (the second approvers) and "
                             "expiresAfter (when to escalate)")
        return policy

    def to_json(self) -> dict[str, Any]:
        return {"approvers": list(self.approvers), "expiresAfterSeconds": self.expires_after_s,
                "onExpiry": self.on_expiry, "escalateTo": list(self.escalate_to),
                "remindAfterSeconds": self.remind_after_s}


def _approvers(data: dict[str, Any], field_name: str) -> tuple[str, ...]:
    """Approver references of ``approvers``/``escalateTo``; ``ValueError`` naming the field
    and the forms (``key:<id>``, ``role:<role>``, ``cli:<user>``, ``<channel>:<id>``)."""
    found = []
    for reference in data.get(field_name) or ():
        try:
            found.append(actors.check_approver(reference))
        except ValueError as exc:
            raise ValueError(f"{field_name}: {exc}") from None
    return tuple(found)


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval as the store keeps it (``GET /approvals/{id}``, ``toren approvals show``).

    ``digest`` is the arguments' digest a decision must name (computed from ``arguments`` for
    approvals kept before digests). ``parameters``: the tool's JSON Schema, which edited
    arguments must match (``None`` for approvals kept before edits: not checked then).
    """

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
    digest: str = ""
    scope: str = "call"
    edited_arguments: dict[str, Any] | None = None
    answer: str | None = None
    granted_by: str | None = None
    parameters: dict[str, Any] | None = None
    on_expiry: str = "deny"
    escalate_to: tuple[str, ...] = ()
    escalation_level: int = 0
    escalated_at: datetime | None = None
    remind_at: datetime | None = None
    reminded_at: datetime | None = None

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", arguments_digest(self.arguments))

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @property
    def escalates(self) -> bool:
        """Whether its expiry moves it to the second approvers (once) instead of ending it."""
        return self.on_expiry == "escalate" and self.escalation_level == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "agent": self.agent, "run_id": self.run_id, "task_id": self.task_id,
            "call_id": self.call_id, "tool": self.tool, "arguments": self.arguments,
            "digest": self.digest, "status": self.status, "approvers": list(self.approvers),
            "requested_at": _iso(self.requested_at), "expires_at": _iso(self.expires_at),
            "decided_by": self.decided_by, "decided_at": _iso(self.decided_at),
            "reason": self.reason, "scope": self.scope,
            "edited_arguments": self.edited_arguments, "answer": self.answer,
            "granted_by": self.granted_by, "parameters": self.parameters,
            "on_expiry": self.on_expiry, "escalate_to": list(self.escalate_to),
            "escalation_level": self.escalation_level,
            "escalated_at": _iso(self.escalated_at), "remind_at": _iso(self.remind_at),
            "reminded_at": _iso(self.reminded_at),
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def may_decide(approvers: tuple[str, ...] | list[str], who: Actor | str) -> bool:
    """Whether ``who`` may decide: an ``Actor``, or the label of one that is no API key
    (``cli:<user>``, ``telegram:<id>``). See ``toren.core.actors.may_decide``."""
    actor = who if isinstance(who, Actor) else actor_of_label(who)
    return actors.may_decide(approvers, actor)


def decision_text(tool: str, outcome: str, decided_by: str, reason: str | None) -> str:
    """The tool result the model reads for a call that was denied or expired."""
    because = f": {reason}" if reason else ""
    if outcome == "expired":
        return (f"Error: the call to {tool} was not run: its approval expired before anyone "
                f"decided{because}.")
    return f"Error: the call to {tool} was not run: {decided_by} denied it{because}."


def edit_note(tool: str, decided_by: str, before: dict[str, Any],
              after: dict[str, Any]) -> str:
    """What the model reads before the result of a call a person edited: who, which
    arguments changed, and what the call ran with."""
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                     or (k in before) != (k in after))
    return (f"[{decided_by} edited the arguments of this call to {tool} before it ran; "
            f"changed: {', '.join(changed) or 'nothing'}; it ran with "
            f"{json.dumps(after, sort_keys=True, ensure_ascii=False)}]\n")


def reminder_text(tool: str, approval: str, approvers: tuple[str, ...] | list[str],
                  escalated: bool = False) -> str:
    """The notice a session's channel gets while an approval still waits (``remindAfter``)
    or when it moved to the second approvers (``onExpiry: escalate``)."""
    who = ", ".join(approvers) if approvers else "anyone who may decide"
    if escalated:
        return (f"Nobody decided in time: the call to {tool} (approval {approval}) now waits "
                f"for {who}.")
    return f"Reminder: the call to {tool} (approval {approval}) still waits for {who}."


def waiting_text(tool: str, approval: str) -> str:
    """What a receipt and ``toren chat`` say while a task is parked."""
    return f"waiting for approval of {tool} (id {approval})"
