"""The event catalog: every fact Toren records, as (stream, seq, type, data).

A run has one ``run`` stream (written by the orchestrator holding the run lease) and one
``task:<id>`` stream per task (written by that task's lease holder). ``schemas/events.schema.json``
documents every type; ``validate_event`` checks an event against it (the tests do, for every
event they see appended).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toren.schemas import load_schema

RUN_STREAM = "run"

# run stream
RUN_CREATED = "RunCreated"
TASK_SCHEDULED = "TaskScheduled"
TASK_ABSORBED = "TaskAbsorbed"
RUN_FINISHED = "RunFinished"
RUN_CANCELLED = "RunCancelled"
RUN_DEAD_LETTERED = "RunDeadLettered"
# run stream, written by workflow code (toren.workflow)
WAVE_STARTED = "WaveStarted"
VALUE_RECORDED = "ValueRecorded"
TIMER_STARTED = "TimerStarted"
TIMER_FIRED = "TimerFired"
WORKFLOW_LOGGED = "WorkflowLogged"

# task streams
TASK_STARTED = "TaskStarted"
MODEL_CALL_STARTED = "ModelCallStarted"
MODEL_CALL_COMPLETED = "ModelCallCompleted"
TOOL_CALL_STARTED = "ToolCallStarted"
TOOL_CALL_COMPLETED = "ToolCallCompleted"
RETRY_SCHEDULED = "RetryScheduled"
TASK_FINISHED = "TaskFinished"
#: The folded state of a task so far, written every ``TOREN_CHECKPOINT_EVERY`` events so that a
#: resume reads only the log from the latest checkpoint on.
TASK_CHECKPOINT = "TaskCheckpoint"
#: Older turns were replaced by a summary (made by the compaction model call before it).
COMPACTED = "Compacted"
# task streams of sessions (toren.sessions)
#: A user's message to a session, appended by the API when the session awaited input.
USER_MESSAGE = "UserMessage"
#: The agent answered a user's message; the session awaits the next one.
TURN_ENDED = "TurnEnded"
#: The user asked to close the session; the task finishes at its next step.
CLOSE_REQUESTED = "CloseRequested"

#: Why a task or run stopped: the single documented enum (docs/reference/events.md).
STOP_REASONS = ("end_turn", "max_steps", "max_waves", "budget_exhausted", "cancelled", "error")
#: Run statuses; the last four are terminal. ``awaiting_input``: a session waits for a message.
RUN_STATUSES = ("queued", "running", "awaiting_input", "completed", "stopped", "failed",
                "cancelled")
TERMINAL_STATUSES = frozenset({"completed", "stopped", "failed", "cancelled"})


def task_stream(task_id: str) -> str:
    return f"task:{task_id}"


def status_for(stop_reason: str) -> str:
    """The run/task status a stop reason implies."""
    return {"end_turn": "completed", "max_steps": "stopped", "max_waves": "stopped",
            "budget_exhausted": "stopped", "cancelled": "cancelled"}.get(stop_reason, "failed")


@dataclass(frozen=True)
class NewEvent:
    """An event about to be appended (its sequence number is assigned by the append)."""

    type: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "data": self.data}


@dataclass(frozen=True)
class Event:
    """An event read back from the log."""

    run_id: str
    stream: str
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "stream": self.stream, "seq": self.seq, "type": self.type,
                "data": self.data,
                "created_at": self.created_at.isoformat() if self.created_at else None}


def validate_event(stream: str, event_type: str, data: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless the event matches the catalog."""
    import jsonschema  # ~0.15 s to import: only validation needs it, not every toren command

    schema = load_schema("events.schema.json")
    definition = schema["$defs"].get(event_type)
    if definition is None:
        raise jsonschema.ValidationError(f"unknown event type {event_type!r}")
    expected_stream = definition.get("x-stream")
    actual = "run" if stream == RUN_STREAM else "task"
    if expected_stream != actual:
        raise jsonschema.ValidationError(
            f"{event_type} belongs on a {expected_stream} stream, not {stream!r}")
    jsonschema.Draft202012Validator({**definition, "$defs": schema["$defs"]}).validate(data)
