"""The fleet at a glance: workers, queue, runs in flight and recent failures (``toren top``,
``GET /fleet``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from toren.seams.store import Store
from toren.seams.store.fleet import FleetGauges, QueueGauge

#: ``Queue.depth``: what a queue outside the database (SQS) holds per agent.
QueueDepth = Callable[[list[str]], Awaitable[dict[str, dict[str, int]] | None]]

#: Runs in flight and recent failures shown at most.
RUNS_SHOWN = 20
FAILURES_SHOWN = 10


async def with_queue_counts(gauges: FleetGauges, agents: Sequence[str],
                            queue_depth: QueueDepth | None) -> FleetGauges:
    """``gauges`` with the queue's own counts when the queue is not the database's
    (``queue_depth``: SQS's ``Queue.depth``), since the outbox holds only what the relay has
    not sent yet. The oldest ready message's age is then unknown (``None``): SQS reports it
    only to CloudWatch."""
    if queue_depth is None:
        return gauges
    counts = await queue_depth(list(agents))
    if counts is None:
        return gauges
    return replace(gauges, queue={
        agent: QueueGauge(ready=found["ready"], in_flight=found["in_flight"],
                          delayed=found["delayed"], oldest_ready_age_s=None)
        for agent, found in counts.items()})


async def fleet_snapshot(store: Store, live_window_s: float, *,
                         queue_depth: QueueDepth | None = None,
                         runs_shown: int = RUNS_SHOWN,
                         failures_shown: int = FAILURES_SHOWN) -> dict[str, Any]:
    """The JSON ``toren top --json`` prints: live workers (id, version, agents, heartbeat),
    each registered agent's queue and unfinished runs by status, the oldest runs in flight
    with their current step and elapsed seconds, and the latest failed runs.

    A handful of indexed reads; nothing here holds prompts or secrets beyond what ``toren
    jobs`` shows (a failed run's error message). ``queue_depth``: see ``with_queue_counts``.
    """
    now = datetime.now(UTC)
    agents = sorted(await store.registered_agents())
    gauges = await with_queue_counts(await store.fleet_gauges(agents, live_window_s), agents,
                                     queue_depth)
    workers = [{"id": row["id"], "version": row["version"], "agents": list(row["agents"]),
                "hostname": row["hostname"], "pid": row["pid"],
                "started_at": row["started_at"].isoformat(),
                "last_heartbeat": row["heartbeat_at"].isoformat()}
               for row in await store.live_workers(live_window_s)]
    in_flight = [{"id": run.id, "agent": run.agent, "status": run.status, "step": run.step,
                  "tasks": run.tasks, "elapsed_s": round((now - run.created_at)
                                                         .total_seconds(), 1),
                  "created_at": run.created_at.isoformat(),
                  "updated_at": run.updated_at.isoformat(), "error": run.error}
                 for run in await store.runs_in_flight(agents, runs_shown)]
    failures = [{"id": run.id, "agent": run.agent, "stop_reason": run.stop_reason,
                 "error": run.error,
                 "finished_at": run.finished_at.isoformat() if run.finished_at else None}
                for run in await store.list_runs(agents=agents, status="failed",
                                                 limit=failures_shown)] if agents else []
    return {
        "at": now.isoformat(),
        "workers": workers,
        "versions": sorted({str(worker["version"]) for worker in workers}),
        "agents": {agent: {"queue": gauges.queue[agent].to_json() if agent in gauges.queue
                           else None,
                           "dead_letters": gauges.dead_letters.get(agent, 0),
                           "runs": gauges.active_runs.get(agent, {})} for agent in agents},
        "runs_in_flight": in_flight,
        "recent_failures": failures,
    }
