"""The orchestrator: the holder of a run's lease absorbs finished tasks and finishes the run.

A run tick (queue message kind ``run``) is sent when a task finishes and by the guardians for a
run that lost its messages. The tick also re-sends the message of any unfinished task that has
none, which is how a lost task message heals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toren import events as ev
from toren.agents import AgentSpec
from toren.events import NewEvent
from toren.fold import apply_run_event, fold_run
from toren.interfaces import QueueMessage, RunUpdate
from toren.task import task_message

if TYPE_CHECKING:
    from toren.worker import Worker

MAIN_TASK = "main"


def run_outcome(absorbed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A single-task run ends as its main task ended."""
    main = absorbed[MAIN_TASK]
    return {"status": main["status"], "stop_reason": main["stop_reason"],
            "output": main.get("output"), "error": main.get("error")}


async def tick_run(worker: Worker, agent: AgentSpec, message: QueueMessage) -> None:
    """Handle a ``run`` message."""
    assert message.run_id is not None
    store = worker.runtime.store
    found = await worker.acquire(message, ev.RUN_STREAM, with_finished=True)
    if found is None:
        return
    lease, loaded = found
    state = fold_run((e.type, e.data) for e in loaded if e.stream == ev.RUN_STREAM)
    finished = {e.stream.removeprefix("task:"): e.data for e in loaded
                if e.type == ev.TASK_FINISHED}
    ttl = worker.runtime.settings.lease_ttl_s
    if state.terminal:
        await store.append(agent.name, lease, state.next_seq, [], ttl_s=ttl, ack=message,
                           release=True)
        return
    new_events: list[NewEvent] = []
    for task_id in state.unfinished_tasks:
        if task_id in finished:
            data = finished[task_id]
            absorbed = {"task_id": task_id, "status": data["status"],
                        "stop_reason": data["stop_reason"], "output": data.get("output"),
                        "error": data.get("error"), "cost_usd": data.get("cost_usd", 0.0)}
            new_events.append(NewEvent(ev.TASK_ABSORBED, absorbed))
            apply_run_event(state, ev.TASK_ABSORBED, absorbed)
    first_seq = state.next_seq - len(new_events)
    update = None
    if not state.unfinished_tasks:
        outcome = run_outcome(state.absorbed)
        new_events.append(NewEvent(ev.RUN_FINISHED, outcome))
        update = RunUpdate(status=outcome["status"], output=outcome["output"],
                           stop_reason=outcome["stop_reason"], error=outcome["error"],
                           finished=True)
    await store.append(agent.name, lease, first_seq, new_events, ttl_s=ttl, run_update=update,
                       ack=message, release=True)
    worker.observe_append(agent.name, ev.RUN_STREAM, first_seq, new_events)
    missing = [task_message(task_id, state.scheduled[task_id].get("subagent"),
                            state.scheduled[task_id].get("input"))
               for task_id in state.unfinished_tasks]
    if missing:
        await store.ensure_messages(agent.name, message.run_id, missing)
