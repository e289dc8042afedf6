"""A task's side of hard budgets: reserve each model call's worst case in the ledger before it
is made, settle its actual cost after (``toren.core.budgets``, ``toren.seams.store.budgets``).

The task loop asks ``BudgetGuard.reserve`` before recording ``ModelCallStarted``; a refusal ends
the task with stop reason ``budget_exhausted`` and the call is not made. Settlements are
recorded as ``BudgetSettled`` events and written to the ledger right after the append that
carries them, so the log says what was settled before the ledger does; a worker killed in
between leaves a reservation that the ledger reconciles from the log once the lease is gone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from toren.agents import AgentSpec
from toren.core import events as ev
from toren.core.budgets import BudgetDecision, BudgetRequest, worst_case_cost
from toren.core.pricing import Pricing
from toren.errors import TorenError
from toren.seams.model import Model, ModelRequest
from toren.seams.store import BudgetLedger

log = logging.getLogger(__name__)

SCOPE_TEXT = {"run": "the run's budget (limits.maxBudgetUsd)",
              "daily": "the agent's daily budget (limits.dailyBudgetUsd)"}


@dataclass(frozen=True)
class Reservation:
    """A reservation held for one model call."""

    id: int
    amount_usd: float
    step: int
    purpose: Literal["compaction"] | None


@dataclass(frozen=True)
class Reserved:
    """``reserve``'s answer: the reservation (``None`` when the agent has no budget), the events
    to record with the call's ``ModelCallStarted``, or the error that stops the task."""

    reservation: Reservation | None = None
    events: tuple[ev.EventData, ...] = ()
    refusal: dict[str, Any] | None = None


class BudgetGuard:
    """Reservations of one task's model calls against its agent's run and daily budgets."""

    def __init__(self, ledger: BudgetLedger, agent: AgentSpec, run_id: str, stream: str) -> None:
        self.ledger = ledger
        self.agent = agent
        self.run_id = run_id
        self.stream = stream
        #: Settlements recorded but not yet written to the ledger: (reservation id, cost).
        self.unsettled: list[tuple[int, float | None]] = []

    @property
    def active(self) -> bool:
        limits = self.agent.limits
        return limits.max_budget_usd is not None or limits.daily_budget_usd is not None

    async def reserve(self, *, step: int, purpose: Literal["compaction"] | None, model: Model,
                      model_id: str, pricing: Pricing | None, request: ModelRequest,
                      epoch: int) -> Reserved:
        """Reserve the worst case of ``request`` if the agent has a budget: priced per token
        when a price is known, else as the model bounds it (``Model.worst_case_cost_usd``)."""
        if not self.active:
            return Reserved()
        amount = (worst_case_cost(request, pricing) if pricing is not None
                  else model.worst_case_cost_usd(request))
        if amount is None:
            return Reserved(refusal={
                "code": "unknown_cost",
                "message": f"a budget is set but no price is known for {model_id}, so the "
                           "budget cannot be enforced; set pricing: for it in agent.yaml"})
        limits = self.agent.limits
        decision = await self.ledger.reserve(self.agent.name, BudgetRequest(
            run_id=self.run_id, stream=self.stream, epoch=epoch, step=step,
            purpose=purpose or "step", model=model_id, amount_usd=amount,
            run_budget_usd=limits.max_budget_usd, daily_budget_usd=limits.daily_budget_usd))
        if decision.reservation_id is None:
            return Reserved(refusal=refusal(decision, amount))
        spend = tuple(ev.BudgetSpendInfo(scope=s.scope, spent_usd=round(s.spent_usd, 10),
                                         budget_usd=s.budget_usd,
                                         remaining_usd=round(max(0.0, s.budget_usd
                                                                 - s.spent_usd), 10))
                      for s in decision.spend)
        events: list[ev.EventData] = [ev.BudgetReserved(
            step=step, model=model_id, reservation_id=decision.reservation_id,
            reserved_usd=amount, spend=spend, epoch=epoch, purpose=purpose)]
        for scope in decision.warnings:
            crossed = next(s for s in spend if s.scope == scope)
            log.warning("run %s of %s has committed $%.4f of %s ($%g)", self.run_id,
                        self.agent.name, crossed.spent_usd, SCOPE_TEXT[scope],
                        crossed.budget_usd)
            events.append(ev.BudgetWarning(scope=scope, spent_usd=crossed.spent_usd,
                                           budget_usd=crossed.budget_usd, epoch=epoch))
        return Reserved(Reservation(decision.reservation_id, amount, step, purpose),
                        tuple(events))

    def settlement(self, reservation: Reservation | None, cost_usd: float | None,
                   epoch: int) -> ev.BudgetSettled | None:
        """The ``BudgetSettled`` to record for a call that ended (``cost_usd`` ``None``: it was
        not billed); the ledger is told after the append that carries it (``write``)."""
        if reservation is None:
            return None
        self.unsettled.append((reservation.id, cost_usd))
        return ev.BudgetSettled(step=reservation.step, reservation_id=reservation.id,
                                reserved_usd=reservation.amount_usd, settled_usd=cost_usd,
                                epoch=epoch, purpose=reservation.purpose)

    async def write(self) -> None:
        """Write the recorded settlements to the ledger (called after each append)."""
        unsettled, self.unsettled = self.unsettled, []
        for reservation_id, cost_usd in unsettled:
            try:
                await self.ledger.settle(self.agent.name, reservation_id, cost_usd)
            except TorenError as exc:  # reconciled from the log once the lease is gone
                log.warning("could not settle budget reservation %s of run %s: %s",
                            reservation_id, self.run_id, exc)


def refusal(decision: BudgetDecision, amount_usd: float) -> dict[str, Any]:
    """The error a task stops with when its next call's reservation does not fit."""
    scope = decision.refused_by or "run"
    spent = next((s for s in decision.spend if s.scope == scope), None)
    remaining = 0.0 if spent is None else max(0.0, spent.budget_usd - spent.spent_usd)
    budget = "?" if spent is None else f"${spent.budget_usd:g}"
    return {"code": "budget_exhausted", "scope": scope,
            "needed_usd": amount_usd, "remaining_usd": round(remaining, 10),
            "message": f"the next model call could cost up to ${amount_usd:.6f} (its worst "
                       f"case) but only ${remaining:.6f} of {SCOPE_TEXT[scope]} {budget} is "
                       "left, so it was not made"}
