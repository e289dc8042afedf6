"""Child runs for the task loop: consent, depth and idempotent creation of peer calls and
background runs, possibly of agents that another fleet serves (``ChildRuns``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from toren.agents import AgentSpec
from toren.config import Settings
from toren.core import events as ev
from toren.core.events import NewEvent
from toren.core.flow import run_flow
from toren.core.runs import ChildLink
from toren.errors import CallRefused
from toren.execution.messages import run_tick
from toren.execution.ports import ChildOutcome
from toren.seams.store import Store
from toren.seams.telemetry import Tracer


class HostChildRuns:
    """The worker's ``ChildRuns``: reads consent from the database's agent registry, so the
    called agent may be served by another fleet (only its fleet claims the run's messages).
    With tracing on, a child run is created with the traceparent of the caller's message span
    (``Tracer.traceparent``): its spans join the caller's trace."""

    def __init__(self, store: Store, settings: Settings,
                 agents: Mapping[str, AgentSpec], tracer: Tracer | None = None) -> None:
        self.store = store
        self.settings = settings
        self.agents = agents
        self.tracer = tracer or Tracer()

    async def start(self, *, caller: str, parent: ChildLink, agent: str, request: str,
                    idempotency_key: str) -> tuple[str, int]:
        spec = self.agents[caller]
        allowed = spec.peers if parent.kind == "peer" else spec.background
        key_name = "peers" if parent.kind == "peer" else "background"
        if agent not in allowed:
            raise CallRefused(f"agent {caller!r} may not call {agent!r}: add {agent} to "
                              f"{key_name}: in {caller}'s agent.yaml")
        accepted = await self.store.accepted_callers(agent)
        if accepted is None:
            raise CallRefused(
                f"agent {agent!r} is not registered in this database: no fleet serving it has "
                f"started. Start one (toren worker --dir <its directory>) and ask again")
        if caller not in accepted:
            raise CallRefused(
                f"agent {agent!r} does not accept calls from {caller!r}: its consent is missing. "
                f"Add {caller} to acceptsFrom: in {agent}'s agent.yaml and restart its fleet")
        record = await self.store.get_run(parent.run_id, caller)
        depth = (record.depth if record is not None else 0) + 1
        if depth > self.settings.max_call_depth:
            chain = await self._chain(caller, parent.run_id)
            raise CallRefused(
                f"the call to {agent!r} would nest {depth} cross-agent calls deep "
                f"({' -> '.join([*chain, agent])}), more than TOREN_MAX_CALL_DEPTH="
                f"{self.settings.max_call_depth}; answer without it (a cycle of agents asking "
                "each other is stopped here)")
        child_id = str(uuid.uuid4())
        # its flow control, if its agent is served here (else: priority 0, the agent-wide
        # key); the run that started it is its session (concurrency key session)
        called = self.agents.get(agent)
        priority, key = (run_flow(called.concurrency, called.priority, request, run_id=child_id,
                                  parent_run_id=parent.run_id,
                                  fallback_key=f"caller:{parent.run_id}")
                         if called is not None else (0, None))
        run_id, _created = await self.store.create_run(
            agent, child_id, request, idempotency_key=idempotency_key,
            events=[NewEvent.of(ev.RunCreated(agent=agent, input=request,
                                              idempotency_key=idempotency_key, caller=caller,
                                              traceparent=self.tracer.traceparent(),
                                              priority=priority or None,
                                              concurrency_key=key))],
            # the orchestrator of the agent's own fleet schedules its first task: only that
            # fleet knows whether the agent runs a workflow
            messages=[run_tick(f"started by {caller} run {parent.run_id}")],
            parent=replace(parent, depth=depth), priority=priority, concurrency_key=key)
        return run_id, depth

    async def _chain(self, agent: str, run_id: str) -> list[str]:
        """The agents of the calls that led to ``run_id``, outermost first."""
        chain = [agent]
        record = await self.store.get_run(run_id, agent)
        while record is not None and record.parent_run_id and len(chain) < 50:
            chain.insert(0, record.parent_agent or "?")
            record = await self.store.get_run(record.parent_run_id, record.parent_agent)
        return chain

    async def outcome(self, agent: str, run_id: str) -> ChildOutcome | None:
        record = await self.store.get_run(run_id, agent)
        if record is None:
            return ChildOutcome("failed", "error", None, {
                "code": "run_not_found", "message": f"run {run_id} of {agent} is gone"}, 0.0)
        if record.status not in ev.TERMINAL_STATUSES:
            return None
        events = await self.store.load_events(agent, run_id)
        cost = sum(e.data.get("cost_usd") or 0.0 for e in events
                   if e.type == ev.MODEL_CALL_COMPLETED)
        return ChildOutcome(record.status, record.stop_reason,  # type: ignore[arg-type]
                            _text(record.output), record.error, round(cost, 10))


def _text(output: Any) -> str | None:
    if output is None or isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, sort_keys=True)
