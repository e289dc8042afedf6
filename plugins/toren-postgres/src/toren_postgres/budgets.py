"""The ``BudgetLedger`` of the Postgres store: ``budget_reservations`` in each agent's schema."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from toren.plugin.drivers import (
    BudgetDecision,
    BudgetLedger,
    BudgetRequest,
    BudgetScope,
    BudgetSpend,
    decide_reservation,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query, query


class PostgresBudgetLedger(PostgresConnection, BudgetLedger):
    """Reservations per agent (agent migration ``0005_budget_reservations``), serialised by a
    transaction-scoped advisory lock on the agent."""

    async def reserve(self, agent: str, request: BudgetRequest) -> BudgetDecision:
        schema = schema_name_for(agent)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(query("budget_lock"), {"key": f"toren-budget:{schema}"})
            await conn.execute(agent_query("reconcile_budget", schema))
            run_committed, day_committed, _held, _expired = await _committed(
                conn, schema, request.run_id)
            committed: dict[BudgetScope, tuple[float, float]] = {}
            if request.run_budget_usd is not None:
                committed["run"] = (run_committed, request.run_budget_usd)
            if request.daily_budget_usd is not None:
                committed["daily"] = (day_committed, request.daily_budget_usd)
            refused, warnings = decide_reservation(request.amount_usd, committed)
            extra = 0.0 if refused else request.amount_usd
            spend = tuple(BudgetSpend(scope, spent + extra, budget)
                          for scope, (spent, budget) in committed.items())
            if refused is not None:
                return BudgetDecision(None, refused_by=refused, spend=spend)
            cursor = await conn.execute(agent_query("insert_reservation", schema), {
                "run_id": request.run_id, "stream": request.stream, "epoch": request.epoch,
                "step": request.step, "purpose": request.purpose, "model": request.model,
                "amount": request.amount_usd})
            row = await cursor.fetchone()
            assert row is not None
            first: list[BudgetScope] = []
            for scope in warnings:  # past 80%: warn only about a run or a day not warned of
                claimed = await conn.execute(agent_query("budget_warn", schema),
                                             {"scope": scope, "run_id": request.run_id})
                if await claimed.fetchone() is not None:
                    first.append(scope)
            return BudgetDecision(int(row[0]), spend=spend, warnings=tuple(first))

    async def settle(self, agent: str, reservation_id: int, cost_usd: float | None) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(agent_query("settle_reservation", schema_name_for(agent)),
                               {"id": reservation_id, "cost": cost_usd})

    async def spend(self, agent: str, run_id: str, run_budget_usd: float | None,
                    daily_budget_usd: float | None) -> dict[str, object]:
        schema = schema_name_for(agent)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(query("budget_lock"), {"key": f"toren-budget:{schema}"})
            await conn.execute(agent_query("reconcile_budget", schema))
            run_committed, day_committed, held, expired = await _committed(conn, schema, run_id)
        return {"run": _scope("run", run_committed, run_budget_usd),
                "daily": _scope("daily", day_committed, daily_budget_usd),
                "held_usd": round(held, 10), "expired_reservations": expired}


async def _committed(conn: AsyncConnection[Any], schema: str,
                     run_id: str) -> tuple[float, float, float, int]:
    cursor = await conn.execute(agent_query("budget_committed", schema), {"run_id": run_id})
    row = await cursor.fetchone()
    assert row is not None
    return float(row[0]), float(row[1]), float(row[2]), int(row[3])


def _scope(scope: BudgetScope, spent: float, budget: float | None) -> dict[str, object]:
    if budget is None:
        return {"scope": scope, "spent_usd": round(spent, 10), "budget_usd": None,
                "remaining_usd": None}
    return BudgetSpend(scope, spent, budget).to_json()
