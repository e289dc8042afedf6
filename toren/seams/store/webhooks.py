"""Completion webhooks' outbox: deliveries written with the status change, claimed and sent."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

#: What became of an attempt: delivered, to be tried again, or given up on.
AttemptOutcome = Literal["delivered", "retry", "failed"]


@dataclass(frozen=True)
class WebhookDelivery:
    """One event for one subscription, as the webhook dispatcher claims it.

    ``id`` is the event id receivers deduplicate on (the same on every attempt); ``attempts``
    counts this one (a claim is an attempt, so one that dies mid-send still counts);
    ``body`` is ``None`` until the first attempt fixes it (``fix_webhook_body``).
    """

    id: str
    agent: str
    run_id: str
    event: str
    run_status: str
    url: str
    secret_env: str | None
    attempts: int
    body: str | None
    occurred_at: datetime


@dataclass(frozen=True)
class WebhookAttempt:
    """One try of a delivery: when, how long, the receiver's status (``None``: no response,
    ``error`` says why)."""

    attempt: int
    started_at: datetime
    duration_ms: float
    status_code: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "started_at": self.started_at.isoformat(),
                "duration_ms": round(self.duration_ms, 1), "status_code": self.status_code,
                "error": self.error}


@dataclass(frozen=True)
class WebhookDeliveryRecord:
    """A delivery as ``toren jobs show`` and ``GET /runs/{id}/webhooks`` show it."""

    id: str
    event: str
    run_status: str
    url: str
    source: str
    state: str
    attempts: int
    occurred_at: datetime
    next_attempt_at: datetime | None
    ended_at: datetime | None
    last_error: str | None
    history: list[WebhookAttempt] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.event, "run_status": self.run_status,
                "url": self.url, "source": self.source, "state": self.state,
                "attempts": self.attempts, "occurred_at": self.occurred_at.isoformat(),
                "next_attempt_at": (self.next_attempt_at.isoformat()
                                    if self.next_attempt_at and self.state == "pending" else None),
                "ended_at": self.ended_at.isoformat() if self.ended_at else None,
                "last_error": self.last_error,
                "history": [a.to_json() for a in self.history]}


class WebhookStore(abc.ABC):
    """Completion webhooks' deliveries (docs/guides/webhooks.md).

    The contract that makes them an outbox: when a run's status changes to a terminal one
    (from one that is not) or to ``awaiting_approval``/``awaiting_input``, the same
    transaction writes one pending delivery per subscription that asked for that event (the
    run's ``webhooks`` of ``RunLog.create_run``, then its agent's ``notify``, registered with
    the agent by ``Migrator.migrate``), whichever write changed it. The host's dispatcher
    (``toren.host.webhooks``) claims due deliveries, sends them and records each attempt.
    """

    @abc.abstractmethod
    async def claim_webhook_deliveries(self, agents: Sequence[str], holder: str, limit: int,
                                       visibility_s: float) -> list[WebhookDelivery]:
        """Claim up to ``limit`` pending deliveries of ``agents`` that are due (oldest first)
        for ``holder``: each attempt count goes up by one and the delivery is hidden for
        ``visibility_s`` (a dispatcher that dies mid-send leaves it to come back then).
        Concurrent claims never hand one delivery to two holders while its claim lasts."""

    @abc.abstractmethod
    async def fix_webhook_body(self, delivery_id: str, body: str) -> str:
        """Keep ``body`` as the delivery's body unless it has one already; return the one
        kept. Called before the first attempt, so every retry sends the same bytes."""

    @abc.abstractmethod
    async def record_webhook_attempt(self, delivery_id: str, holder: str,
                                     attempt: WebhookAttempt, outcome: AttemptOutcome,
                                     retry_in_s: float = 0.0) -> bool:
        """Record ``attempt`` and what became of the delivery: ``delivered``, ``failed`` (no
        more attempts), or ``retry`` (due again in ``retry_in_s``). Only while ``holder``
        holds the claim; returns whether it did (an expired claim taken over by another
        dispatcher records nothing)."""

    @abc.abstractmethod
    async def wait_webhooks(self, timeout_s: float) -> None:
        """Return when a delivery may have been written (a notification), or after
        ``timeout_s``; a store that cannot notify just sleeps."""

    @abc.abstractmethod
    async def forget_webhook_deliveries(self, ended_before_s: float) -> int:
        """Delete the deliveries that ended (delivered or failed) more than
        ``ended_before_s`` seconds ago, with their attempts; return how many. Pending ones are
        kept whatever their age. Called by the dispatcher now and then
        (``TOREN_WEBHOOK_KEEP``)."""

    @abc.abstractmethod
    async def webhook_deliveries(self, run_id: str) -> list[WebhookDeliveryRecord]:
        """The run's deliveries, oldest first, each with its attempts. Called by
        ``toren jobs show`` and ``GET /runs/{id}/webhooks``."""
