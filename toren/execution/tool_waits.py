"""A tool that waits for a signal (``toren.wait_for_signal``) in the task loop.

The first time a tool waits, ``wait_for_signal`` raises ``ToolWaitRequested``; the loop records
``ToolWaitStarted`` (the run's last signal number as ``after``, the deadline) and appends it with
the delayed message that wakes the task at the deadline and a write of the run's row (see
``start_tool_waits``), then parks the task: run status ``waiting``, no lease, message or
connection held. Sending a signal queues a message for every task with an open wait of that
name in the transaction that records it (the store's ``SignalLog.send_signal``). The task taken
up again finds the first signal of the name numbered above ``after`` (or the deadline passed),
records ``ToolWaitEnded`` with its payload, and only then runs the tool again from the top,
where the wait returns the recorded payload: a crash between the two runs the tool again from
the same record, so each wait takes one outcome, once.

A Python stack cannot outlive a ``kill -9``, so a tool that waits is re-run rather than resumed:
its code before the wait must be safe to repeat (docs/guides/signals.md says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from toren.agents import AgentSpec
from toren.core import events as ev
from toren.core.fold import PendingToolCall, TaskState
from toren.core.runs import RunUpdate
from toren.execution.context import ToolWaitRequested
from toren.execution.ports import ReadStream
from toren.execution.task_port import TaskPort
from toren.seams.shapes import OutgoingMessage

#: The wake-up at a deadline comes this long after it, so that it finds the deadline passed.
DEADLINE_SLACK_S = 0.05


def _signals(events: Sequence[ev.Event]) -> list[ev.Event]:
    return [e for e in events if e.type == ev.SIGNAL_RECEIVED]


async def last_signal(read_stream: ReadStream, agent: str, run_id: str) -> int:
    """The number of the run's latest signal (0: none yet)."""
    return max((e.seq for e in _signals(await read_stream(agent, run_id, "signals"))),
               default=0)


def _parked_status(agent: AgentSpec) -> RunUpdate:
    # a workflow's other tasks may still be working: its run stays running (the write still
    # locks the run's row, which orders it against a signal being sent: see start_tool_waits)
    return RunUpdate(status="waiting" if agent.workflow is None else "running")


async def start_tool_waits(runner: TaskPort,
                           requests: Sequence[tuple[PendingToolCall, ToolWaitRequested]],
                           wake: OutgoingMessage) -> None:
    """Record and append a ``ToolWaitStarted`` for each wait a tool asked for (``after``: the
    run's last signal number when it asked), with a delayed ``wake`` at each deadline, in one
    append that also writes the run's row.

    Writing the row orders the append against a concurrent send, which holds the row
    ``FOR SHARE``: a send that committed first is seen by the read that follows the append
    (``advance_tool_waits``), and a later one sees the open wait and queues the wake-up."""
    now = runner.ports.clock()
    messages = []
    for pending, request in requests:
        deadline = None
        if request.timeout_s is not None:
            deadline = (now + timedelta(seconds=request.timeout_s)).isoformat()
            messages.append(OutgoingMessage(wake.kind, wake.payload,
                                            request.timeout_s + DEADLINE_SLACK_S))
        runner.record(ev.ToolWaitStarted(
            step=pending.step, call_id=pending.call.id, wait=request.wait, name=request.name,
            after=request.after, epoch=runner.lease.epoch, timeout_s=request.timeout_s,
            deadline=deadline))
    await runner.flush(messages=messages, run_update=_parked_status(runner.agent))


async def advance_tool_waits(runner: TaskPort, read_stream: ReadStream,
                             calls: Sequence[PendingToolCall], wake: OutgoingMessage, *,
                             crash_point: Callable[[str], None],
                             just_started: frozenset[str] = frozenset()) -> bool:
    """End each open wait of ``calls`` that has its signal (or whose deadline passed) and
    return ``True`` (the loop then runs those tools again); with none ended, park the task and
    return ``False``. ``just_started``: calls whose wait this handler began (their deadline's
    wake-up is queued already)."""
    signals = _signals(await read_stream(runner.agent.name, runner.run_id, "signals"))
    now = runner.ports.clock()
    ended = False
    later: list[float] = []
    for pending in calls:
        wait = runner.state.tool_waits[pending.call.id]
        taken = next((s for s in signals if s.seq > wait.after
                      and s.data.get("name") == wait.name), None)
        if taken is not None:
            runner.record(ev.ToolWaitEnded(
                call_id=wait.call_id, wait=wait.wait, name=wait.name, epoch=runner.lease.epoch,
                signal=taken.seq, payload=taken.data.get("payload")))
            ended = True
            continue
        if wait.deadline is None:
            continue
        left = (datetime.fromisoformat(wait.deadline) - now).total_seconds()
        if left <= 0:
            runner.record(ev.ToolWaitEnded(call_id=wait.call_id, wait=wait.wait,
                                           name=wait.name, epoch=runner.lease.epoch,
                                           timed_out=True))
            ended = True
        elif pending.call.id not in just_started:  # woken early: wake again at the deadline
            later.append(left + DEADLINE_SLACK_S)
    if ended:
        runner.pending_update = RunUpdate(status="running")
        await runner.flush()
        crash_point("after_tool_wait_ended")
        return True
    await runner.flush(done=True, run_update=RunUpdate(status="waiting")
                       if runner.agent.workflow is None else None,
                       messages=[OutgoingMessage(wake.kind, wake.payload, min(later))]
                       if later else ())
    return False


def waiting_for(state: TaskState) -> list[ev.ToolWaitStarted]:
    """The open tool waits of a task, oldest first (what ``toren jobs show`` and receipts
    say it waits for)."""
    return sorted(state.tool_waits.values(), key=lambda w: (w.step, w.call_id))
