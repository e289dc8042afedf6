"""What the served agents' model calls cost per day or week, with their budgets and the day's
use of them: ``GET /costs``, the console's Costs page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from toren.agents import AgentSpec
from toren.core.costs import Period, costs_report, today_utc
from toren.seams.store.budgets import BudgetLedger
from toren.seams.store.migrations import Migrator
from toren.seams.store.reader import RunReader

#: The run id the day's spend is read with: no run has it (``BudgetLedger.spend`` needs one).
_NO_RUN = "00000000-0000-0000-0000-000000000000"


class CostsService:
    """The costs report over the store's ``RunReader.costs`` and the ``BudgetLedger``, for
    the served ``agents`` (or, when none is, every agent registered in the database: ``toren
    costs`` on this machine's database, whose agents' budgets it does not know).
    ``runtime.costs``; needs the store open."""

    def __init__(self, reader: RunReader, budgets: BudgetLedger,
                 agents: Mapping[str, AgentSpec], registered: Migrator) -> None:
        self._reader = reader
        self._budgets = budgets
        self._agents = agents
        self._registered = registered

    async def agents(self) -> list[str]:
        """The agents a report covers by default: the served ones, else every registered one,
        by name."""
        return sorted(self._agents or await self._registered.registered_agents())

    async def report(self, period: Period, since: datetime, until: datetime,
                     agents: Sequence[str]) -> dict[str, Any]:
        """The model calls of ``agents`` (served here) in ``[since, until)`` per ``period``,
        agent and model, with each agent's budgets (``limits.maxBudgetUsd`` per run,
        ``limits.dailyBudgetUsd``) and what its UTC day has spent of the daily one, as the
        ledger counts it (held reservations included). ``core.costs.costs_report`` has the
        shape. ``NotImplementedError`` from a store that does not add up costs."""
        rows = await self._reader.costs(agents, since, until, period)
        budgets = [await self.budget(name) for name in agents]
        return costs_report(rows, period=period, since=since, until=until, agents=agents,
                            budgets=budgets)

    async def budget(self, agent: str) -> dict[str, Any]:
        """``{"agent", "run_budget_usd", "daily_budget_usd", "today"}``: the agent's budgets
        (``null`` when it has none, or is not served here) and, when it has either,
        ``today``: ``{"day", "spent_usd", "remaining_usd"}`` (``remaining_usd`` null without a
        daily budget)."""
        spec = self._agents.get(agent)
        run_budget = spec.limits.max_budget_usd if spec is not None else None
        daily_budget = spec.limits.daily_budget_usd if spec is not None else None
        today = None
        if run_budget is not None or daily_budget is not None:
            spend = await self._budgets.spend(agent, _NO_RUN, None, daily_budget)
            daily = spend["daily"]
            assert isinstance(daily, dict)
            today = {"day": today_utc().isoformat(), "spent_usd": daily["spent_usd"],
                     "remaining_usd": daily["remaining_usd"]}
        return {"agent": agent, "run_budget_usd": run_budget, "daily_budget_usd": daily_budget,
                "today": today}
