"""Peer calls and background runs in the task loop: tool calls that start runs of other agents.

``ask_<peer>`` is a durable wait. Its ``ToolCallStarted`` is committed first; the peer run is
then created with the call's idempotency key (so a resumed task finds the same run, never a
second one) and ``PeerCallStarted`` records its id; while the run has not ended, the task
parks: its message is acknowledged, its lease released and its run marked ``waiting``, so no
worker, lease or connection is held. The peer run's end wakes the task (a message the store
sends in the transaction that ends it), which records ``PeerCallFinished`` and the answer as
the tool's result, and goes on. ``start_background_run`` creates the run the same way and
returns at once; a session is told of its end between turns (``BackgroundRunFinished``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from toren.agents import AgentSpec
from toren.agents.children import ASK_PREFIX, BACKGROUND_TOOL
from toren.core import events as ev
from toren.core.decisions import truncate_output
from toren.core.fold import PendingToolCall
from toren.core.runs import ChildLink, RunUpdate
from toren.errors import CallRefused
from toren.execution.ports import ChildOutcome
from toren.execution.task_port import TaskPort


def child_call(agent: AgentSpec, tool_name: str) -> Literal["peer", "background"] | None:
    """Whether a tool call of ``agent`` starts a child run, and which kind."""
    if tool_name == BACKGROUND_TOOL and agent.background:
        return "background"
    if tool_name.startswith(ASK_PREFIX) and tool_name[len(ASK_PREFIX):] in agent.peers:
        return "peer"
    return None


async def advance_child_calls(runner: TaskPort, calls: Sequence[PendingToolCall]) -> bool:
    """Start, check or finish each child call; ``False`` when the task parked to wait."""
    waiting = False
    for pending in calls:
        if child_call(runner.agent, pending.call.name) == "background":
            await _start_background(runner, pending)
        elif not await _advance_peer_call(runner, pending):
            waiting = True
    if waiting:
        # A workflow's run has other tasks that may still be working: it stays running (the
        # guardian then re-sends this task's message now and then; it finds the peer still
        # working and parks again). A single-task run is waiting, which the guardian skips.
        parked = RunUpdate(status="waiting") if runner.agent.workflow is None else None
        await runner.flush(run_update=parked, done=True)
        return False
    return True


async def _start_child(runner: TaskPort, pending: PendingToolCall, kind: str,
                       agent: str) -> tuple[str, int] | None:
    """Create (or find, by the call's idempotency key) the child run: its id and depth, or
    ``None`` when it was refused (the refusal is recorded as the call's result)."""
    call = pending.call
    try:
        created = await runner.ports.children.start(
            caller=runner.agent.name, agent=agent,
            parent=ChildLink(agent=runner.agent.name, run_id=runner.run_id,
                             task_id=runner.task_id, kind=kind, depth=0),
            request=str(call.arguments.get("request", "")),
            idempotency_key=pending.idempotency_key)
    except CallRefused as exc:
        runner.record(runner.tool_error(pending.step, call, "refused",
                                        f"Error: the {'call' if kind == 'peer' else 'run'} "
                                        f"was refused: {exc.message}"))
        return None
    runner.ports.crash_point("after_child_run")
    return created


async def _advance_peer_call(runner: TaskPort, pending: PendingToolCall) -> bool:
    """``True`` once the call has its result recorded (or was refused)."""
    call = pending.call
    started = runner.state.peer_calls.get(call.id)
    if started is None:
        peer = call.name[len(ASK_PREFIX):]
        created = await _start_child(runner, pending, "peer", peer)
        if created is None:
            return True
        run_id, depth = created
        started = ev.PeerCallStarted(step=pending.step, call_id=call.id, peer=peer,
                                     run_id=run_id, depth=depth, epoch=runner.lease.epoch)
        runner.record(started)
    outcome = await runner.ports.children.outcome(started.peer, started.run_id)
    if outcome is None:
        return False
    runner.record(ev.PeerCallFinished(
        step=pending.step, call_id=call.id, peer=started.peer, run_id=started.run_id,
        status=outcome.status, cost_usd=outcome.cost_usd, epoch=runner.lease.epoch))
    text = _answer(started.peer, started.run_id, outcome)
    output, truncated, size = truncate_output(text, runner.spec.limits.max_tool_output_bytes)
    failed = outcome.status != "completed"
    runner.record(ev.ToolCallCompleted(
        step=pending.step, call_id=call.id, name=call.name, output=output, is_error=failed,
        error_kind="exception" if failed else None, truncated=truncated, original_bytes=size,
        duration_ms=0.0, epoch=runner.lease.epoch))
    runner.pending_update = RunUpdate(status="running")  # no longer waiting
    return True


def _answer(peer: str, run_id: str, outcome: ChildOutcome) -> str:
    if outcome.status == "completed":
        return outcome.output or ""
    why = (outcome.error or {}).get("message") or outcome.stop_reason or outcome.status
    partial = f" Its last words: {outcome.output}" if outcome.output else ""
    return (f"Error: {peer} (run {run_id}) did not answer: it ended {outcome.status}: "
            f"{why}.{partial}")


async def _start_background(runner: TaskPort, pending: PendingToolCall) -> None:
    call = pending.call
    agent = str(call.arguments.get("agent", ""))
    created = await _start_child(runner, pending, "background", agent)
    if created is None:
        return
    run_id, _depth = created
    runner.record(ev.BackgroundRunStarted(step=pending.step, call_id=call.id, agent=agent,
                                          run_id=run_id, epoch=runner.lease.epoch))
    text = (f"Started run {run_id} of agent {agent} in the background. Its answer will be "
            "posted into this conversation when it finishes; carry on meanwhile.")
    runner.record(ev.ToolCallCompleted(
        step=pending.step, call_id=call.id, name=call.name, output=text, is_error=False,
        error_kind=None, truncated=False, original_bytes=len(text.encode()), duration_ms=0.0,
        epoch=runner.lease.epoch))


async def tell_background_outcomes(runner: TaskPort) -> list[str]:
    """Record a ``BackgroundRunFinished`` for each background run of the session that ended
    and that it has not been told about; return the notices' texts (for channels)."""
    state = runner.state
    told: list[str] = []
    for run_id, started in list(state.background.items()):
        if run_id in state.background_told:
            continue
        outcome = await runner.ports.children.outcome(started.agent, run_id)
        if outcome is None:
            continue
        runner.record(ev.BackgroundRunFinished(
            agent=started.agent, run_id=run_id, status=outcome.status, output=outcome.output,
            error=outcome.error, cost_usd=outcome.cost_usd, epoch=runner.lease.epoch))
        told.append(ev.background_notice(started.agent, run_id, outcome.status,
                                          outcome.output, outcome.error))
    return told
