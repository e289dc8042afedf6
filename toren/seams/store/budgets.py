"""The budget ledger: reservations of model-call cost that hold across a run's parallel tasks."""

from __future__ import annotations

import abc

from toren.core.budgets import BudgetDecision, BudgetRequest, BudgetSpend


class BudgetLedger(abc.ABC):
    """Reservations of worst-case model-call cost against a run's ``limits.maxBudgetUsd`` and an
    agent's ``limits.dailyBudgetUsd`` (all its runs in one UTC day).

    The task loop (through ``ExecutionPorts.budgets``) calls ``reserve`` before every model call
    of an agent with a budget and ``settle`` after it; ``Runtime.get_run`` and the receipt call
    ``spend``. Reservations of all workers are serialised per agent, so twenty parallel tasks
    can never together reserve more than the budget.

    A reservation lives as long as the task lease it was made under (``BudgetRequest.stream``
    and ``epoch``). One left held by a worker that died is reconciled by the next ``reserve`` or
    ``spend`` of the agent once the lease is gone: settled at the cost its task's log recorded
    for the call if the response was recorded, else charged at its reserved worst case (the
    provider may have billed a call cut short).
    """

    @abc.abstractmethod
    async def reserve(self, agent: str, request: BudgetRequest) -> BudgetDecision:
        """Reserve ``request.amount_usd`` if it fits every budget, in one transaction.

        Reconciles the agent's expired reservations first. Returns the decision: granted with
        a reservation id, or refused naming the scope that has no room (nothing is held then).
        """

    @abc.abstractmethod
    async def settle(self, agent: str, reservation_id: int, cost_usd: float | None) -> None:
        """Replace a held reservation by the call's actual cost; ``None`` releases it (the call
        failed and was not billed). A reservation already reconciled is left as it is."""

    @abc.abstractmethod
    async def spend(self, agent: str, run_id: str, run_budget_usd: float | None,
                    daily_budget_usd: float | None) -> dict[str, object]:
        """The run's spend against its budget and the agent's spend today (UTC) against its
        daily budget: ``{"run": {...}, "daily": {...}, "held_usd": ...,
        "expired_reservations": ...}``: each scope ``scope``, ``spent_usd`` (settled, held and
        expired), ``budget_usd`` and ``remaining_usd`` (``BudgetSpend.to_json``; a scope
        without a budget shows its spend with ``budget_usd`` and ``remaining_usd`` null), the
        run's reservations still held, and how many of them were charged at their worst case.
        Reconciles the agent's expired reservations first, as ``reserve`` does."""


__all__ = ["BudgetDecision", "BudgetLedger", "BudgetRequest", "BudgetSpend"]
