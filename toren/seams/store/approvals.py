"""Approvals: tool calls that wait for a person, and the decisions that let them run (or not)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toren.core.approvals import ApprovalRecord
from toren.seams.shapes import OutgoingMessage

if TYPE_CHECKING:
    from toren.core.events import ApprovalRequested


class ApprovalStore(abc.ABC):
    """Where approvals wait and are decided, once (``docs/guides/approvals.md``).

    The task loop opens the approvals its log requested before it parks; the host API
    (``Runtime.decide_approval``, behind the CLI and ``POST /approvals/{id}/approve``)
    decides them; both read them. A decision wakes the parked task in the same transaction.

    Every record the store returns carries ``extra["due"]``: whether its expiry has passed by
    the store's clock (``False`` without one), and ``extra["remind_due"]``: whether its
    reminder time has passed and the reminder was not sent yet. The task loop and the host
    expire (or escalate) a pending approval that is due (``decide_approval(..., "expired",
    ...)``, ``escalate_approval``).
    """

    @abc.abstractmethod
    async def open_approvals(self, agent: str, run_id: str, task_id: str,
                             requests: Sequence[ApprovalRequested],
                             wake: OutgoingMessage,
                             parameters: Mapping[str, dict[str, Any]] | None = None
                             ) -> list[ApprovalRecord]:
        """Keep each requested approval unless it is kept already; return them all, in the
        order of ``requests``, as they are now (pending or decided).

        Called by the task loop when a task's only work left is approvals, before it parks
        (and again each time it is taken up until they are decided). Idempotent: a worker that
        died after recording the requests opens the same approvals again. ``wake`` is the
        queue message a decision sends to take the task up again; the expiry of each is its
        ``expires_after_s`` from the first open, by the database clock, and so is its
        reminder (``remind_after_s``). ``parameters``: each tool's JSON Schema by tool name,
        kept with the approval so that an edit is checked against it.

        A request whose tool and digest (``ApprovalRequested.digest``, else the digest of its
        arguments) match an approval of the same run approved with scope ``run`` is kept
        already ``approved``: ``decided_by`` the one who approved always, ``granted_by`` that
        approval's id, nobody asked.
        """

    @abc.abstractmethod
    async def decide_approval(self, approval_id: str, outcome: str, decided_by: str,
                              reason: str | None, *, scope: str = "call",
                              arguments: dict[str, Any] | None = None,
                              answer: str | None = None
                              ) -> tuple[ApprovalRecord, bool] | None:
        """Decide a pending approval (``approved``, ``denied``, ``edited`` with ``arguments``
        or ``answered`` with ``answer`` before its expiry; ``expired`` once it has passed), in
        one transaction with waking its task: the run becomes ``running`` if it was
        ``awaiting_approval`` and the task's message is queued.

        ``scope="run"`` (with ``approved``): also approve, in the same transaction, every
        pending approval of the same run with the same tool and digest (``granted_by`` this
        one), waking their tasks; later ones are approved when opened (``open_approvals``).

        Called by ``Runtime.decide_approval`` and by the task loop (for expiry). Returns the
        approval as it is now and whether this call decided it (``False``: it was decided
        before, and the record carries that first decision; or it cannot be decided, as when
        it expired or its run ended). ``None`` when there is no such approval. A pending
        approval whose run has ended becomes ``cancelled``.
        """

    @abc.abstractmethod
    async def escalate_approval(self, approval_id: str) -> ApprovalRecord | None:
        """Move a pending approval whose expiry has passed, and whose ``on_expiry`` is
        ``escalate`` and that was not escalated yet, to its ``escalate_to`` approvers with a
        new expiry (its ``expires_after_s`` again from now) and a new reminder time; return it
        as it is now (``None``: no such approval). Once only, whatever the number of workers.
        Called by the task loop when it finds the approval due."""

    @abc.abstractmethod
    async def mark_reminded(self, approval_id: str) -> bool:
        """Note that the reminder of a pending approval whose reminder time has passed was
        sent; ``True`` only for the one call that noted it (the caller then sends it).
        Called by the task loop; records carry ``extra["remind_due"]`` when one is due."""

    @abc.abstractmethod
    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        """One approval by id (``None``: none, or the id is no UUID). ``decide_approval``
        answers ``None`` for such an id too."""

    @abc.abstractmethod
    async def list_approvals(self, *, agents: Sequence[str] | None, agent: str | None = None,
                             run_id: str | None = None, status: str | None = None,
                             limit: int = 50) -> list[ApprovalRecord]:
        """Approvals of ``agents`` (the agents served; ``None``: every agent's), newest request
        first, filtered by
        agent, run and status. Called by ``GET /approvals`` and ``toren approvals list``."""

    @abc.abstractmethod
    async def cancel_approvals(self, run_id: str) -> int:
        """Mark the run's pending approvals ``cancelled`` (its run was cancelled); return
        how many. Called by ``Runtime.cancel_run``."""
