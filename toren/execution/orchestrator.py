"""The orchestrator: the holder of a run's lease absorbs finished tasks and finishes the run.

A run tick (queue message kind ``run``) is sent when a run is created (workflows, and runs that
another agent's task started), when a task
finishes, when a durable timer is due, when a signal is sent to the run (with it, in one
transaction) or a signal wait's timeout is due, and by the guardians for a run that lost its
messages; a guardian's tick re-sends the message of any unfinished task, unfired timer or
signal wait's timeout that has none.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from toren.agents import AgentSpec
from toren.core import events as ev
from toren.core.catalog import decode, decode_events
from toren.core.events import Event, NewEvent
from toren.core.fold import RunState, apply_run_event, fold_run
from toren.core.runs import RunUpdate
from toren.errors import RunVersionStale
from toren.execution.forking import with_fork
from toren.execution.messages import (
    MAIN_TASK,
    signal_timeout_message,
    task_message,
    timer_message,
)
from toren.execution.ports import ExecutionPorts
from toren.execution.workflow import execute
from toren.seams.shapes import OutgoingMessage, QueueMessage


def run_outcome(absorbed: dict[str, ev.TaskAbsorbed]) -> ev.RunFinished:
    """A single-task run ends as its main task ended."""
    main = absorbed[MAIN_TASK]
    return ev.RunFinished(status=main.status, stop_reason=main.stop_reason, output=main.output,
                          error=main.error)


async def tick_run(ports: ExecutionPorts, agent: AgentSpec, message: QueueMessage) -> None:
    """Handle a ``run`` message: absorb finished tasks, fire a due timer, run the workflow (or
    finish a single-task run), and append all of it in one transaction."""
    assert message.run_id is not None
    store = ports.store
    found = await ports.acquire(message, ev.RUN_STREAM, True)
    if found is None:
        return
    lease, loaded = found
    if ports.version_under_lease is not None and not ports.version_under_lease(agent, lease):
        raise RunVersionStale(f"run {message.run_id} is not on the version of {agent.name} "
                              "this tick was handed")
    state = fold_run(decode_events(e for e in loaded if e.stream == ev.RUN_STREAM))
    for event in loaded:
        if event.stream == ev.SIGNALS_STREAM and event.type == ev.SIGNAL_RECEIVED:
            state.received[event.seq] = decode(event.type, event.data)
    finished: dict[str, ev.TaskFinished] = {
        e.stream.removeprefix("task:"): decode(e.type, e.data) for e in loaded
        if e.type == ev.TASK_FINISHED}
    ttl = ports.settings.lease_ttl_s
    first_seq = state.next_seq
    if state.terminal:
        await store.append(agent.name, lease, first_seq, [], ttl_s=ttl, ack=message,
                           release=True)
        return
    new_events: list[NewEvent] = []

    def record(event: ev.EventData) -> None:
        new_events.append(NewEvent.of(event))
        apply_run_event(state, event)

    for task_id in state.unfinished_tasks:
        if task_id in finished:
            task = finished[task_id]
            record(ev.TaskAbsorbed(task_id=task_id, status=task.status,
                                   stop_reason=task.stop_reason, output=task.output,
                                   error=task.error, cost_usd=task.cost_usd))
    timer = message.payload.get("timer")
    if timer in state.timers and timer not in state.timers_fired:
        record(ev.TimerFired(timer=timer))
    rearm = _signal_timeout(state, message, record, ports.clock())
    messages: list[OutgoingMessage] = []
    outcome: ev.RunFinished | None = None
    if state.caller is not None and state.caller not in agent.accepts_from and not (
            state.scheduled or state.waves):
        # the caller checked consent in the registry; this fleet's agent.yaml has the last word
        outcome = ev.RunFinished(status="failed", stop_reason="error", output=None, error={
            "code": "call_refused",
            "message": f"agent {agent.name!r} does not accept calls from {state.caller!r}: "
                       f"add {state.caller} to acceptsFrom: in its agent.yaml"})
    elif agent.workflow is None:
        if MAIN_TASK not in state.scheduled:
            # created by another agent's task (a peer call or a background run), which cannot
            # know whether this agent runs a workflow: its first tick schedules the task
            record(ev.TaskScheduled(task_id=MAIN_TASK, subagent=None, input=state.input))
            messages = [task_message(MAIN_TASK, None, state.input)]
        elif not state.unfinished_tasks:
            outcome = run_outcome(state.absorbed)
    else:
        executed = await execute(agent.workflow, state, message.run_id, agent,
                                 clock=ports.clock)
        if any(event.type == ev.WAVE_STARTED for event in executed.events):
            ports.crash_point("mid_wave_dispatch")
        new_events += executed.events
        messages = executed.messages + rearm
        outcome = _explain_divergence(executed.finished, loaded)
    messages = with_fork(messages, state.fork)
    update = None
    if outcome is not None:
        new_events.append(NewEvent.of(outcome))
        update = RunUpdate(status=outcome.status, output=outcome.output,
                           stop_reason=outcome.stop_reason, error=outcome.error, finished=True)
        messages = []
    await store.append(agent.name, lease, first_seq, new_events, ttl_s=ttl, messages=messages,
                       run_update=update, ack=message, release=True)
    ports.appended(agent.name, ev.RUN_STREAM, first_seq, new_events)
    if any(event.type == ev.SIGNAL_CONSUMED for event in new_events):
        ports.crash_point("after_signal_consumed")
    if outcome is None and _heals(message):
        await store.ensure_messages(agent.name, message.run_id,
                                    with_fork(_expected_messages(state, ports.clock()), state.fork))


def _signal_timeout(state: RunState, message: QueueMessage,
                    record: Callable[[ev.EventData], None], now: datetime
                    ) -> list[OutgoingMessage]:
    """On a signal wait's timeout tick: record that the wait timed out, unless a signal of its
    name is there to take (the workflow takes it this tick) or the tick came early (a message
    to try again when it is due is returned). ``now``: the database's clock (``fire_at`` was
    computed by it too)."""
    wait = message.payload.get("signal_wait")
    if not isinstance(wait, int) or wait not in state.open_signal_waits:
        return []
    started = state.signal_waits[wait]
    if started.fire_at is None or state.unconsumed_signal(started.name) is not None:
        return []
    remaining = (datetime.fromisoformat(started.fire_at) - now).total_seconds()
    # the queue's delay and fire_at both go by the database's clock, fire_at as a worker
    # estimated it: a second early is the same moment
    if remaining > 1.0:
        return [signal_timeout_message(wait, remaining)]
    record(ev.SignalWaitTimedOut(wait=wait))
    return []


def _explain_divergence(outcome: ev.RunFinished | None,
                        loaded: list[Event]) -> ev.RunFinished | None:
    """A non-determinism error of a run that was moved to another version of its agent says
    so: the workflow code changed mid-run (the step that diverged is already named)."""
    if outcome is None or (outcome.error or {}).get("code") != "non_determinism":
        return outcome
    upgrades = [e for e in loaded if e.type == ev.AGENT_VERSION_UPGRADED]
    if not upgrades:
        return outcome
    last = upgrades[-1].data
    before = (last.get("from_version") or "none")[:12]
    after = last["version"][:12] + (f" ({last['human_version']})"
                                    if last.get("human_version") else "")
    message = (f"{outcome.error['message']}; workflow.py changed mid-run: the run was "  # type: ignore[index]
               f"upgraded from version {before} to {after}, whose workflow replays the "
               "recorded steps differently. The run stops here rather than diverge")
    return ev.RunFinished(status=outcome.status, stop_reason=outcome.stop_reason,
                          output=outcome.output,
                          error={**(outcome.error or {}), "message": message})


def _heals(message: QueueMessage) -> bool:
    """Ticks from the guardian (or by hand) re-send lost messages; routine ticks (a task
    finished, a timer fired) do not need to, so they skip the extra queries."""
    reason = str(message.payload.get("reason", ""))
    return ("timer" not in message.payload and "signal_wait" not in message.payload
            and reason != "signal" and not reason.startswith("task "))


def _expected_messages(state: RunState, now: datetime) -> list[OutgoingMessage]:
    """What should be queued for a waiting run: its unfinished tasks and unfired timers."""
    expected = [task_message(task_id, state.scheduled[task_id].subagent,
                             state.scheduled[task_id].input,
                             output=state.scheduled[task_id].output)
                for task_id in state.unfinished_tasks]
    expected += [timer_message(number, 0.0) for number in state.timers
                 if number not in state.timers_fired]
    expected += [signal_timeout_message(
        wait, (datetime.fromisoformat(fire_at) - now).total_seconds())
        for wait in state.open_signal_waits
        if (fire_at := state.signal_waits[wait].fire_at) is not None]
    return expected
