"""The fold: pure functions from a stream's typed events to its state. No I/O, no clocks.

``TaskState`` is a struct whose fields are the whole state: a ``TaskCheckpoint`` is that state
encoded as it is (``snapshot``), and restoring one copies every field back, so a field added to
the state can never be left out of a checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import msgspec

from toren.core import events as ev
from toren.core.approvals import edit_note
from toren.core.compaction import compacted
from toren.core.messages import Message, ToolCall


def input_text(value: Any) -> str:
    """A run or task input as the text the model reads (JSON for structured input)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


class PendingToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool call recorded as started with no recorded result."""

    step: int
    call: ToolCall
    idempotency_key: str
    epoch: int


class TaskState(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Everything a worker needs to continue a task, folded from its ``task:<id>`` stream."""

    next_seq: int = 1
    started: ev.TaskStarted | None = None
    messages: list[Message] = msgspec.field(default_factory=list)
    steps: int = 0
    model_call_pending: ev.ModelCallStarted | None = None
    #: Started tool calls with no result yet, in the order they were recorded.
    pending_tools: list[PendingToolCall] = msgspec.field(default_factory=list)
    cost_usd: float = 0.0
    unknown_cost_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    consecutive_invalid_calls: int = 0
    compactions: int = 0
    #: A compaction happened after the latest main model call (a context-length error right
    #: after one is not retried with another).
    compacted_since_call: bool = False
    retry: ev.RetryScheduled | None = None
    finished: ev.TaskFinished | None = None
    epochs: list[int] = msgspec.field(default_factory=list)
    #: The sequence number of the latest checkpoint folded (0: none).
    last_checkpoint_seq: int = 0
    #: The task is a session's conversation (it takes turns instead of finishing).
    session: bool = False
    #: Messages the user sent to the session so far (the current turn's number).
    turns: int = 0
    #: ``steps`` when the current turn began (``max_steps`` counts per turn in a session).
    turn_first_step: int = 0
    #: The current turn ended; the session waits for the user's next message.
    awaiting_input: bool = False
    close_requested: ev.CloseRequested | None = None
    #: Tool calls that wait for a person's decision, in the order they were requested.
    pending_approvals: list[ev.ApprovalRequested] = msgspec.field(default_factory=list)
    #: What the model reads before a call's result because a person edited its arguments
    #: (``ApprovalDecided`` edited), by tool call id, until the result is recorded.
    approval_notes: dict[str, str] = msgspec.field(default_factory=dict)
    #: Approvals that moved to their second approvers (``ApprovalEscalated``).
    escalated_approvals: list[str] = msgspec.field(default_factory=list)
    #: The model of ``fallbacks:`` that took over after the task's own model failed
    #: (``ModelFellBack``); ``None`` while the task's own model answers.
    model: str | None = None
    #: ``ask_user`` calls waiting for an answer, by tool call id.
    questions: dict[str, ev.QuestionAsked] = msgspec.field(default_factory=dict)
    #: The run's subject and pinned memories, as the task started (``memory:``); ``None``:
    #: not loaded (the agent has no memory, or the task has not started).
    memory: ev.MemoryLoaded | None = None
    #: Tool calls parked in ``toren.wait_for_signal``: the open wait, by tool call id.
    tool_waits: dict[str, ev.ToolWaitStarted] = msgspec.field(default_factory=dict)
    #: The waits of a tool call that ended (a signal taken or a timeout), in order, by tool
    #: call id, until its result is recorded: its next run returns them from wait_for_signal.
    tool_wait_ends: dict[str, list[ev.ToolWaitEnded]] = msgspec.field(default_factory=dict)
    #: Peer calls waiting for their run, by tool call id.
    peer_calls: dict[str, ev.PeerCallStarted] = msgspec.field(default_factory=dict)
    #: Background runs this session started, by run id, and the ones it has been told about.
    background: dict[str, ev.BackgroundRunStarted] = msgspec.field(default_factory=dict)
    background_told: list[str] = msgspec.field(default_factory=list)
    #: The task belongs to a fork (``TaskForked``): its overrides, and what it copied.
    fork: ev.TaskForked | None = None
    #: Repair turns its final answers got for not matching the output schema (``output:``).
    output_repairs: int = 0
    #: The step whose response waits for the agent's policies (``ModelCallCompleted``
    #: recorded with ``policies``; cleared by its ``PolicyDecided``): nothing acts on it yet.
    policy_step: int | None = None
    #: Calls whose arguments a policy rewrote, by call id -> the note the model reads with
    #: the call's result (``PolicyDecided`` before_tool_call rewrite).
    rewritten: dict[str, str] = msgspec.field(default_factory=dict)

    def snapshot(self) -> TaskCheckpoint:
        """The state as a ``TaskCheckpoint`` to append at ``next_seq`` (the state after it)."""
        fields = {name: _copy(getattr(self, name)) for name in self.__struct_fields__}
        return TaskCheckpoint(**fields | {"next_seq": self.next_seq + 1,
                                          "last_checkpoint_seq": self.next_seq})

    def restore(self, checkpoint: TaskState) -> None:
        """Become the state a checkpoint recorded: every field, as the class declares them."""
        for name in self.__struct_fields__:
            setattr(self, name, _copy(getattr(checkpoint, name)))
        # checkpoints written before this field was recorded sit at next_seq - 1 all the same
        self.last_checkpoint_seq = self.next_seq - 1

    @property
    def last_assistant(self) -> Message | None:
        for message in reversed(self.messages):
            if message.role == "assistant":
                return message
        return None


def _copy(value: Any) -> Any:
    """A state field's value, its container copied: the state grows its lists in place, which
    must never change a checkpoint (their items are immutable)."""
    return type(value)(value) if isinstance(value, list | dict | set) else value


class TaskCheckpoint(TaskState):
    """The task's folded state so far (written every TOREN_CHECKPOINT_EVERY events, in the same
    transaction as the events it follows). A resume reads the stream from its latest
    checkpoint; folding the whole stream gives the same state."""

    stream = "task"


def checkpoint_due(state: TaskState, every: int) -> bool:
    """Whether more than ``every`` events were appended since the latest checkpoint."""
    return state.next_seq - state.last_checkpoint_seq > every


def apply_task_event(state: TaskState, event: ev.EventData | TaskCheckpoint) -> None:
    """Fold one typed task event into ``state`` (in place)."""
    if isinstance(event, TaskCheckpoint):
        state.restore(event)
        return
    state.next_seq += 1
    epoch = getattr(event, "epoch", None)
    if epoch is not None and (not state.epochs or state.epochs[-1] != epoch):
        state.epochs.append(epoch)
    match event:
        case ev.TaskStarted():
            state.started = event
            state.session = state.session or event.session
            if not event.session:
                state.messages.append(Message(role="user", text=input_text(event.input),
                                              attachments=event.attachments))
        case ev.TaskPromptChanged() if state.started is not None:
            # later steps are made with this prompt: the state names it as the task's own
            state.started = msgspec.structs.replace(state.started,
                                                    prompt_sha256=event.prompt_sha256)
        case ev.UserMessage():
            state.session = True
            state.turns = event.turn
            state.turn_first_step = state.steps
            state.awaiting_input = False
            state.consecutive_invalid_calls = 0
            state.messages.append(Message(role="user", text=event.text,
                                          attachments=event.attachments))
        case ev.TurnEnded():
            state.awaiting_input = True
        case ev.CloseRequested():
            state.session = True
            state.close_requested = event
        case ev.ModelCallStarted():
            state.model_call_pending = event
        case ev.ModelCallCompleted():
            _apply_model_call(state, event)
        case ev.ToolCallStarted():
            call = ToolCall(id=event.call_id, name=event.name, arguments=event.arguments)
            state.pending_tools.append(PendingToolCall(event.step, call, event.idempotency_key,
                                                       event.epoch))
        case ev.ToolCallCompleted():
            state.pending_tools = [p for p in state.pending_tools if p.call.id != event.call_id]
            state.rewritten.pop(event.call_id, None)
            state.approval_notes.pop(event.call_id, None)
            state.tool_waits.pop(event.call_id, None)
            state.tool_wait_ends.pop(event.call_id, None)
            state.messages.append(Message(role="tool", text=event.output,
                                          tool_call_id=event.call_id, is_error=event.is_error,
                                          attachments=event.attachments))
            if event.error_kind in ("unknown_tool", "invalid_arguments"):
                state.consecutive_invalid_calls += 1
            else:
                state.consecutive_invalid_calls = 0
        case ev.ApprovalRequested():
            state.pending_approvals.append(event)
        case ev.ApprovalDecided():
            request = next((a for a in state.pending_approvals
                            if a.approval_id == event.approval_id), None)
            state.pending_approvals = [a for a in state.pending_approvals
                                       if a.approval_id != event.approval_id]
            if event.outcome == "edited" and event.arguments is not None:
                state.approval_notes[event.call_id] = edit_note(
                    request.name if request else "the tool", event.decided_by,
                    request.arguments if request else {}, event.arguments)
        case ev.ApprovalEscalated():
            state.escalated_approvals.append(event.approval_id)
        case ev.OutputRejected():
            state.output_repairs = event.attempt
            state.messages.append(Message(role="user", text=event.text))
        case ev.Compacted():
            state.messages = compacted(state.messages, event.replaced, event.summary)
            state.compactions += 1
            state.compacted_since_call = True
        case ev.RetryScheduled():
            state.retry = event
            state.model_call_pending = None
        case ev.TaskFinished():
            state.finished = event
        case ev.ModelFellBack():
            state.model = event.to_model
            state.model_call_pending = None
            state.retry = None  # the fallback gets its own retries
        case ev.QuestionAsked():
            state.questions[event.call_id] = event
        case ev.QuestionAnswered():
            state.questions.pop(event.call_id, None)
        case ev.MemoryLoaded():
            state.memory = event
        case ev.ToolWaitStarted():
            state.tool_waits[event.call_id] = event
        case ev.ToolWaitEnded():
            state.tool_waits.pop(event.call_id, None)
            state.tool_wait_ends[event.call_id] = [*state.tool_wait_ends.get(event.call_id, ()),
                                                   event]
        case ev.PeerCallStarted():
            state.peer_calls[event.call_id] = event
        case ev.PeerCallFinished():
            state.peer_calls.pop(event.call_id, None)
        case ev.BackgroundRunStarted():
            state.background[event.run_id] = event
        case ev.BackgroundRunFinished():
            state.background_told.append(event.run_id)
            state.messages.append(Message(role="user", text=ev.background_notice(
                event.agent, event.run_id, event.status, event.output, event.error)))
        case ev.TaskForked():
            _apply_fork(state, event)
        case ev.PolicyDecided():
            _apply_policy(state, event)


def _apply_policy(state: TaskState, event: ev.PolicyDecided) -> None:
    """A response's policies were asked (its calls' fates follow in the same append); a
    redaction replaces the text every later step reads; a rewrite leaves a note for the
    call's result."""
    if event.hook == "after_model_response":
        state.policy_step = None
        if event.decision == "redact" and event.text is not None:
            for index in range(len(state.messages) - 1, -1, -1):
                if state.messages[index].role == "assistant":
                    state.messages[index] = replace(state.messages[index], text=event.text)
                    break
    elif event.hook == "before_tool_call" and event.decision == "rewrite" and event.call_id:
        state.rewritten[event.call_id] = (
            f"Note: policy {event.plugin} rewrote this call's arguments"
            f"{': ' + event.reason if event.reason else ''}.")


def _apply_fork(state: TaskState, event: ev.TaskForked) -> None:
    """The copied steps were paid for by the source run: the fork's cost and tokens start at
    zero, and a model override replaces a fallback the source had taken."""
    state.fork = event
    state.cost_usd = 0.0
    state.unknown_cost_calls = 0
    state.input_tokens = 0
    state.output_tokens = 0
    if event.model is not None:
        state.model = None


def _apply_model_call(state: TaskState, event: ev.ModelCallCompleted) -> None:
    state.model_call_pending = None
    state.retry = None
    if event.purpose != "compaction":
        state.steps = event.step
        state.compacted_since_call = False
        calls = tuple(ToolCall(c.id, c.name, c.arguments, c.arguments_error)
                      for c in event.tool_calls)
        state.messages.append(Message(role="assistant", text=event.text, tool_calls=calls,
                                      provider_data=event.provider_data))
        if event.policies:
            state.policy_step = event.step
    state.input_tokens += event.usage.input_tokens
    state.output_tokens += event.usage.output_tokens
    if event.cost_usd is None:
        state.unknown_cost_calls += 1
    else:
        state.cost_usd += event.cost_usd


def fold_task(events: Iterable[ev.EventData | TaskCheckpoint]) -> TaskState:
    """Fold the typed events of one task stream, in sequence order."""
    state = TaskState()
    for event in events:
        apply_task_event(state, event)
    return state


class RunState(msgspec.Struct, kw_only=True):
    """A run's orchestration state, folded from its ``run`` stream."""

    next_seq: int = 1
    agent: str = ""
    input: Any = None
    #: The agent whose task started the run (``RunCreated.caller``), if one did.
    caller: str | None = None
    scheduled: dict[str, ev.TaskScheduled] = msgspec.field(default_factory=dict)
    absorbed: dict[str, ev.TaskAbsorbed] = msgspec.field(default_factory=dict)
    finished: ev.RunFinished | ev.RunDeadLettered | None = None
    cancelled: ev.RunCancelled | None = None
    waves: dict[int, ev.WaveStarted] = msgspec.field(default_factory=dict)
    values: list[ev.ValueRecorded] = msgspec.field(default_factory=list)
    timers: dict[int, ev.TimerStarted] = msgspec.field(default_factory=dict)
    timers_fired: set[int] = msgspec.field(default_factory=set)
    logs: int = 0
    #: The run is a fork (``RunForked``).
    fork: ev.RunForked | None = None
    #: The waits of ``ctx.wait_for_signal`` that found no signal at once, by number.
    signal_waits: dict[int, ev.SignalWaitStarted] = msgspec.field(default_factory=dict)
    #: What each wait took, by wait number.
    signals_consumed: dict[int, ev.SignalConsumed] = msgspec.field(default_factory=dict)
    signal_waits_timed_out: set[int] = msgspec.field(default_factory=set)
    signal_reads: list[ev.SignalsRead] = msgspec.field(default_factory=list)
    #: The signals sent to the run (its ``signals`` stream), by number: not folded from the
    #: ``run`` stream but added by the orchestrator (``add_signal``) from what it loaded.
    received: dict[int, ev.SignalReceived] = msgspec.field(default_factory=dict)

    def unconsumed_signal(self, name: str) -> tuple[int, ev.SignalReceived] | None:
        """The oldest signal of ``name`` that no wait has taken, with its number."""
        taken = {consumed.signal for consumed in self.signals_consumed.values()}
        for number in sorted(self.received):
            signal = self.received[number]
            if signal.name == name and number not in taken:
                return number, signal
        return None

    @property
    def open_signal_waits(self) -> list[int]:
        """Waits that started and have neither taken a signal nor timed out."""
        return [wait for wait in self.signal_waits if wait not in self.signals_consumed
                and wait not in self.signal_waits_timed_out]

    @property
    def terminal(self) -> bool:
        return self.finished is not None or self.cancelled is not None

    @property
    def unfinished_tasks(self) -> list[str]:
        return [task_id for task_id in self.scheduled if task_id not in self.absorbed]


def apply_run_event(state: RunState, event: ev.EventData) -> None:
    """Fold one typed run event into ``state`` (in place)."""
    state.next_seq += 1
    match event:
        case ev.RunCreated():
            state.agent = event.agent
            state.input = event.input
            state.caller = event.caller
        case ev.TaskScheduled():
            state.scheduled[event.task_id] = event
        case ev.TaskAbsorbed():
            state.absorbed[event.task_id] = event
        case ev.RunFinished() | ev.RunDeadLettered():
            state.finished = event
        case ev.RunCancelled():
            state.cancelled = event
        case ev.WaveStarted():
            state.waves[event.wave] = event
        case ev.ValueRecorded():
            state.values.append(event)
        case ev.TimerStarted():
            state.timers[event.timer] = event
        case ev.TimerFired():
            state.timers_fired.add(event.timer)
        case ev.WorkflowLogged():
            state.logs += 1
        case ev.RunForked():
            state.fork = event
        case ev.SignalWaitStarted():
            state.signal_waits[event.wait] = event
        case ev.SignalConsumed():
            state.signals_consumed[event.wait] = event
        case ev.SignalWaitTimedOut():
            state.signal_waits_timed_out.add(event.wait)
        case ev.SignalsRead():
            state.signal_reads.append(event)


def fold_run(events: Iterable[ev.EventData]) -> RunState:
    """Fold the typed events of a run stream, in sequence order."""
    state = RunState()
    for event in events:
        apply_run_event(state, event)
    return state
