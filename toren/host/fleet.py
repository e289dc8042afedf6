"""The fleet at a glance: workers, queue, runs in flight and recent failures (``toren top``,
``GET /fleet``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
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
    with their current step and elapsed seconds, the latest failed runs, and each provider
    rate-limit bucket (limits, what its window holds, calls waiting, pause, counters).

    A handful of indexed reads; nothing here holds prompts or secrets beyond what ``toren
    jobs`` shows (a failed run's error message). ``queue_depth``: see ``with_queue_counts``.
    Each agent shows its lane (``runtime:``, as the process that registered it last had it;
    ``None`` if unknown) and how many live workers serve it; ``unserved`` lists the agents
    with work waiting that no live worker serves.
    """
    now = await store.database_now()  # the runs' times are the database's: their ages too
    agents = sorted(await store.registered_agents())
    gauges = await with_queue_counts(await store.fleet_gauges(agents, live_window_s), agents,
                                     queue_depth)
    workers = [{"id": row["id"], "version": row["version"], "agents": list(row["agents"]),
                "hostname": row["hostname"], "pid": row["pid"],
                "started_at": row["started_at"].isoformat(),
                "last_heartbeat": row["heartbeat_at"].isoformat(),
                "lane": row.get("lane") or "all", "supervisor": row.get("supervisor")}
               for row in await store.live_workers(live_window_s)]
    lanes = await store.agent_lanes()
    served_by = workers_serving(agents, workers)
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
                           "runs": gauges.active_runs.get(agent, {}),
                           "lane": lanes.get(agent),
                           "served_by": served_by[agent]} for agent in agents},
        "unserved": unserved(agents, gauges, served_by, lanes),
        "runs_in_flight": in_flight,
        "recent_failures": failures,
        # the provider rate-limit buckets the fleet shares (TOREN_RATE_LIMITS, limits.rate)
        "rate_limits": [bucket.to_json() for bucket in await store.rate_limit_state()],
    }


def workers_serving(agents: Sequence[str], workers: Sequence[Mapping[str, Any]]
                    ) -> dict[str, int]:
    """How many of the live ``workers`` (``WorkerRegistry.live_workers`` rows) serve each
    agent: their lane and agent list include it."""
    return {agent: sum(agent in worker["agents"] for worker in workers) for agent in agents}


def unserved(agents: Sequence[str], gauges: FleetGauges, served_by: Mapping[str, int],
             lanes: Mapping[str, str]) -> list[dict[str, Any]]:
    """The agents with queue messages (ready, delayed or in flight) that no live worker
    serves, with their lane when known: a long agent's runs with no ``--lane long`` worker
    alive wait here, visibly, rather than silently. (A run parked for a person has no
    message: it needs no worker until the answer comes.)"""
    found = []
    for agent in agents:
        queue = gauges.queue.get(agent)
        waiting = (queue.ready + queue.delayed + queue.in_flight) if queue else 0
        active = sum(gauges.active_runs.get(agent, {}).values())
        if served_by.get(agent) or not waiting:
            continue
        lane = lanes.get(agent)
        where = f"lane {lane}" if lane else f"agent {agent}"
        found.append({"agent": agent, "lane": lane, "waiting": waiting, "active_runs": active,
                      "message": f"no live worker serves {where}: {agent} has {waiting} "
                                 f"message(s) waiting and {active} unfinished run(s)"})
    return found
