"""``ask_user`` in the task loop: the agent asks a person and waits, holding nothing.

The call's ``ToolCallStarted`` is committed with the model response, like any call's. The loop
then records ``QuestionAsked`` (once: a resumed task finds it in its state and never asks
again) and appends it, keeps the question in the store (``QuestionStore.open_question``,
idempotent), and parks: its message is acknowledged, its lease released and its run marked
``awaiting_input``, so no worker, lease or connection is held. The first answer settles the
question's row and queues the task's message in one transaction; the worker that takes the
task up reads the answer, records ``QuestionAnswered`` and the answer as the call's result in
one append, and goes on. A question past its expiry is settled ``expired`` by the loop itself
(a delayed message wakes it then), and the model reads that nobody answered.
"""

from __future__ import annotations

from collections.abc import Sequence

from toren.agents import AgentSpec
from toren.agents.questions import ASK_USER_TOOL
from toren.core import events as ev
from toren.core.decisions import truncate_output
from toren.core.fold import PendingToolCall
from toren.core.questions import (
    ANSWERED_BY_TOREN,
    QuestionRecord,
    expiry_seconds,
    question_id,
    result_text,
)
from toren.core.runs import RunUpdate
from toren.execution.task_port import TaskPort
from toren.seams.shapes import OutgoingMessage


def is_question(agent: AgentSpec, tool_name: str) -> bool:
    """Whether a tool call of ``agent`` is ``ask_user`` (the agent enabled ``askUser:``)."""
    return tool_name == ASK_USER_TOOL and agent.ask_user


def _ask(runner: TaskPort, pending: PendingToolCall) -> ev.QuestionAsked | None:
    """Record the question of a call not asked yet; ``None`` (its error result recorded)
    when its arguments cannot be a question."""
    call = pending.call
    try:
        expires_after_s = expiry_seconds(call.arguments.get("expires_after"))
    except ValueError as exc:
        runner.record(runner.tool_error(pending.step, call, "invalid_arguments",
                                        f"Error: invalid arguments for {call.name}: {exc}"))
        return None
    if runner.ports.questions is None:
        runner.record(runner.tool_error(pending.step, call, "refused", (
            "Error: nobody can be asked here: this host keeps no questions. Carry on "
            "without the answer.")))
        return None
    asked = ev.QuestionAsked(
        step=pending.step, question_id=question_id(pending.idempotency_key), call_id=call.id,
        question=str(call.arguments["question"]),
        choices=tuple(str(c) for c in call.arguments.get("choices") or ()),
        expires_after_s=expires_after_s, epoch=runner.lease.epoch)
    runner.record(asked)
    return asked


def _settle(runner: TaskPort, pending: PendingToolCall, asked: ev.QuestionAsked,
            record: QuestionRecord) -> None:
    """Copy a settled question into the log, and its answer as the call's result."""
    outcome = record.status if record.status in ("answered", "expired") else "cancelled"
    answered_at = (record.answered_at or runner.ports.clock()).isoformat()
    runner.record(ev.QuestionAnswered(
        question_id=asked.question_id, call_id=asked.call_id,
        outcome=outcome,  # type: ignore[arg-type]
        answered_by=record.answered_by or ANSWERED_BY_TOREN, answered_at=answered_at,
        answer=record.answer if outcome == "answered" else None, epoch=runner.lease.epoch))
    text = result_text(outcome, record.answer, record.answered_by)
    if outcome != "answered":
        kind: ev.ToolErrorKind = "question_expired" if outcome == "expired" else "abandoned"
        runner.record(runner.tool_error(pending.step, pending.call, kind, text))
        return
    output, truncated, size = truncate_output(text, runner.spec.limits.max_tool_output_bytes)
    runner.record(ev.ToolCallCompleted(
        step=pending.step, call_id=pending.call.id, name=pending.call.name, output=output,
        is_error=False, error_kind=None, truncated=truncated, original_bytes=size,
        duration_ms=0.0, epoch=runner.lease.epoch))


async def advance_questions(runner: TaskPort, calls: Sequence[PendingToolCall],
                            wake: OutgoingMessage) -> bool:
    """Ask, check or settle each ``ask_user`` call; ``False`` when the task parked to wait
    for an answer (``wake`` is the message an answer sends to take it up again)."""
    asked: list[tuple[PendingToolCall, ev.QuestionAsked]] = []
    for pending in calls:
        found = runner.state.questions.get(pending.call.id) or _ask(runner, pending)
        if found is not None:
            asked.append((pending, found))
    if not asked:
        return True
    store = runner.ports.questions
    assert store is not None  # _ask answered the calls otherwise
    await runner.flush()  # the question is in the log before its row exists
    settled: list[tuple[PendingToolCall, ev.QuestionAsked, QuestionRecord]] = []
    waiting: list[QuestionRecord] = []
    for pending, question in asked:
        record = await store.open_question(runner.agent.name, runner.run_id, runner.task_id,
                                           question, wake)
        if record.pending and record.extra.get("due"):  # expired before anyone answered
            expired = await store.answer_question(record.id, None, ANSWERED_BY_TOREN,
                                                  "expired")
            if expired is not None:
                record = expired[0]
        if record.pending:
            waiting.append(record)
        else:
            settled.append((pending, question, record))
    if settled:
        runner.ports.crash_point("after_question_answer")
        for pending, question, record in settled:
            _settle(runner, pending, question, record)
        runner.pending_update = RunUpdate(status="running")
    if not waiting:
        return True
    await _park(runner, waiting, wake)
    return False


async def _park(runner: TaskPort, waiting: Sequence[QuestionRecord],
                wake: OutgoingMessage) -> None:
    """Free the task until an answer (or the earliest expiry) wakes it. A session's chat
    channels show the open question from the store (``GET /sessions/{id}``'s
    ``pending_questions``), so a crash here loses nothing to show."""
    expiries = [r.expires_at for r in waiting if r.expires_at is not None]
    messages = []
    if expiries:  # a nudge at the earliest expiry, which then expires it
        delay = (min(expiries) - runner.ports.clock()).total_seconds()
        messages.append(OutgoingMessage(wake.kind, wake.payload, max(delay, 0.0) + 0.05))
    # a workflow's other tasks may still be working: its run stays running
    parked = RunUpdate(status="awaiting_input") if runner.agent.workflow is None else None
    await runner.flush(run_update=parked, done=True, messages=messages)
