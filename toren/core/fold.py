"""The fold: pure functions from a stream's events to its state. No I/O, no clocks."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toren.core import events as ev
from toren.core.compaction import compacted
from toren.seams.model import Message, ToolCall


def input_text(value: Any) -> str:
    """A run or task input as the text the model reads (JSON for structured input)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class PendingToolCall:
    """A tool call recorded as started with no recorded result."""

    step: int
    call: ToolCall
    idempotency_key: str
    epoch: int


@dataclass
class TaskState:
    """Everything a worker needs to continue a task, folded from its ``task:<id>`` stream."""

    next_seq: int = 1
    started: dict[str, Any] | None = None
    messages: list[Message] = field(default_factory=list)
    steps: int = 0
    model_call_pending: dict[str, Any] | None = None
    pending_tools: dict[str, PendingToolCall] = field(default_factory=dict)
    cost_usd: float = 0.0
    unknown_cost_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    consecutive_invalid_calls: int = 0
    compactions: int = 0
    #: A compaction happened after the latest main model call (a context-length error right
    #: after one is not retried with another).
    compacted_since_call: bool = False
    retry: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    epochs: list[int] = field(default_factory=list)
    last_checkpoint_seq: int = 0
    #: The task is a session's conversation (it takes turns instead of finishing).
    session: bool = False
    #: Messages the user sent to the session so far (the current turn's number).
    turns: int = 0
    #: ``steps`` when the current turn began (``max_steps`` counts per turn in a session).
    turn_first_step: int = 0
    #: The current turn ended; the session waits for the user's next message.
    awaiting_input: bool = False
    close_requested: dict[str, Any] | None = None

    def snapshot(self) -> dict[str, Any]:
        """The state as the data of a ``TaskCheckpoint`` appended at ``next_seq``."""
        return {
            "next_seq": self.next_seq + 1, "started": self.started,
            "messages": [message.to_json() for message in self.messages],
            "steps": self.steps, "model_call_pending": self.model_call_pending,
            "pending_tools": [{"step": p.step, "call": {"id": p.call.id, "name": p.call.name,
                                                        "arguments": p.call.arguments},
                               "idempotency_key": p.idempotency_key, "epoch": p.epoch}
                              for p in self.pending_tools.values()],
            "cost_usd": self.cost_usd, "unknown_cost_calls": self.unknown_cost_calls,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "consecutive_invalid_calls": self.consecutive_invalid_calls, "retry": self.retry,
            "compactions": self.compactions, "compacted_since_call": self.compacted_since_call,
            "finished": self.finished, "epochs": self.epochs,
        } | ({"session": True, "turns": self.turns, "turn_first_step": self.turn_first_step,
              "awaiting_input": self.awaiting_input, "close_requested": self.close_requested}
             if self.session else {})

    def restore(self, data: dict[str, Any]) -> None:
        """Become the state a ``TaskCheckpoint`` recorded (the inverse of ``snapshot``)."""
        pending = [PendingToolCall(p["step"], ToolCall(**p["call"]), p["idempotency_key"],
                                   p["epoch"]) for p in data["pending_tools"]]
        self.next_seq = data["next_seq"]
        self.last_checkpoint_seq = data["next_seq"] - 1
        self.started = data["started"]
        self.messages = [Message.from_json(m) for m in data["messages"]]
        self.steps = data["steps"]
        self.model_call_pending = data["model_call_pending"]
        self.pending_tools = {p.call.id: p for p in pending}
        self.cost_usd = data["cost_usd"]
        self.unknown_cost_calls = data["unknown_cost_calls"]
        self.input_tokens = data["input_tokens"]
        self.output_tokens = data["output_tokens"]
        self.consecutive_invalid_calls = data["consecutive_invalid_calls"]
        self.compactions = data.get("compactions", 0)
        self.compacted_since_call = data.get("compacted_since_call", False)
        self.retry = data["retry"]
        self.finished = data["finished"]
        self.epochs = list(data["epochs"])
        self.session = data.get("session", False)
        self.turns = data.get("turns", 0)
        self.turn_first_step = data.get("turn_first_step", 0)
        self.awaiting_input = data.get("awaiting_input", False)
        self.close_requested = data.get("close_requested")

    @property
    def last_assistant(self) -> Message | None:
        for message in reversed(self.messages):
            if message.role == "assistant":
                return message
        return None


def checkpoint_due(state: TaskState, every: int) -> bool:
    """Whether more than ``every`` events were appended since the latest checkpoint."""
    return state.next_seq - state.last_checkpoint_seq > every


def apply_task_event(state: TaskState, event_type: str, data: dict[str, Any]) -> None:
    """Fold one task event into ``state`` (in place)."""
    if event_type == ev.TASK_CHECKPOINT:
        state.restore(data)
        return
    state.next_seq += 1
    epoch = data.get("epoch")
    if epoch is not None and (not state.epochs or state.epochs[-1] != epoch):
        state.epochs.append(epoch)
    if event_type == ev.TASK_STARTED:
        state.started = data
        state.session = state.session or bool(data.get("session"))
        if not data.get("session"):
            state.messages.append(Message(role="user", text=input_text(data["input"])))
    elif event_type == ev.USER_MESSAGE:
        state.session = True
        state.turns = data["turn"]
        state.turn_first_step = state.steps
        state.awaiting_input = False
        state.consecutive_invalid_calls = 0
        state.messages.append(Message(role="user", text=data["text"]))
    elif event_type == ev.TURN_ENDED:
        state.awaiting_input = True
    elif event_type == ev.CLOSE_REQUESTED:
        state.session = True
        state.close_requested = data
    elif event_type == ev.MODEL_CALL_STARTED:
        state.model_call_pending = data
    elif event_type == ev.MODEL_CALL_COMPLETED:
        state.model_call_pending = None
        state.retry = None
        if data.get("purpose") != "compaction":
            state.steps = data["step"]
            state.compacted_since_call = False
            calls = tuple(ToolCall(**call) for call in data["tool_calls"])
            state.messages.append(Message(role="assistant", text=data["text"], tool_calls=calls,
                                          provider_data=data.get("provider_data")))
        usage = data["usage"]
        state.input_tokens += usage.get("input_tokens", 0)
        state.output_tokens += usage.get("output_tokens", 0)
        if data["cost_usd"] is None:
            state.unknown_cost_calls += 1
        else:
            state.cost_usd += data["cost_usd"]
    elif event_type == ev.TOOL_CALL_STARTED:
        call = ToolCall(id=data["call_id"], name=data["name"], arguments=data["arguments"])
        state.pending_tools[call.id] = PendingToolCall(
            data["step"], call, data["idempotency_key"], data["epoch"])
    elif event_type == ev.TOOL_CALL_COMPLETED:
        state.pending_tools.pop(data["call_id"], None)
        state.messages.append(Message(role="tool", text=data["output"],
                                      tool_call_id=data["call_id"], is_error=data["is_error"]))
        if data.get("error_kind") in ("unknown_tool", "invalid_arguments"):
            state.consecutive_invalid_calls += 1
        else:
            state.consecutive_invalid_calls = 0
    elif event_type == ev.COMPACTED:
        state.messages = compacted(state.messages, data["replaced"], data["summary"])
        state.compactions += 1
        state.compacted_since_call = True
    elif event_type == ev.RETRY_SCHEDULED:
        state.retry = data
        state.model_call_pending = None
    elif event_type == ev.TASK_FINISHED:
        state.finished = data


def fold_task(events: Iterable[tuple[str, dict[str, Any]]]) -> TaskState:
    """Fold ``(type, data)`` pairs of one task stream, in sequence order."""
    state = TaskState()
    for event_type, data in events:
        apply_task_event(state, event_type, data)
    return state


@dataclass
class RunState:
    """A run's orchestration state, folded from its ``run`` stream."""

    next_seq: int = 1
    agent: str = ""
    input: Any = None
    scheduled: dict[str, dict[str, Any]] = field(default_factory=dict)
    absorbed: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: dict[str, Any] | None = None
    cancelled: dict[str, Any] | None = None
    waves: dict[int, dict[str, Any]] = field(default_factory=dict)
    values: list[dict[str, Any]] = field(default_factory=list)
    timers: dict[int, dict[str, Any]] = field(default_factory=dict)
    timers_fired: set[int] = field(default_factory=set)
    logs: int = 0

    @property
    def terminal(self) -> bool:
        return self.finished is not None or self.cancelled is not None

    @property
    def unfinished_tasks(self) -> list[str]:
        return [task_id for task_id in self.scheduled if task_id not in self.absorbed]


def apply_run_event(state: RunState, event_type: str, data: dict[str, Any]) -> None:
    state.next_seq += 1
    if event_type == ev.RUN_CREATED:
        state.agent = data["agent"]
        state.input = data["input"]
    elif event_type == ev.TASK_SCHEDULED:
        state.scheduled[data["task_id"]] = data
    elif event_type == ev.TASK_ABSORBED:
        state.absorbed[data["task_id"]] = data
    elif event_type in (ev.RUN_FINISHED, ev.RUN_DEAD_LETTERED):
        state.finished = data
    elif event_type == ev.RUN_CANCELLED:
        state.cancelled = data
    elif event_type == ev.WAVE_STARTED:
        state.waves[data["wave"]] = data
    elif event_type == ev.VALUE_RECORDED:
        state.values.append(data)
    elif event_type == ev.TIMER_STARTED:
        state.timers[data["timer"]] = data
    elif event_type == ev.TIMER_FIRED:
        state.timers_fired.add(data["timer"])
    elif event_type == ev.WORKFLOW_LOGGED:
        state.logs += 1


def fold_run(events: Iterable[tuple[str, dict[str, Any]]]) -> RunState:
    state = RunState()
    for event_type, data in events:
        apply_run_event(state, event_type, data)
    return state
