"""Pure decisions: given a folded state, what happens next. No I/O, no clocks, no randomness
(callers pass a random number in where jitter is needed)."""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from toren.core import events as ev
from toren.core.events import StopReason
from toren.core.fold import PendingToolCall, TaskState
from toren.core.limits import Limits
from toren.core.messages import ToolCall
from toren.core.output import MAX_OUTPUT_REPAIRS, OutputSchema, repair_text

#: A model that names unknown tools or passes invalid arguments this many times in a row is
#: stopped with stop reason ``error`` (each attempt went back to it as a tool error first).
MAX_CONSECUTIVE_INVALID_TOOL_CALLS = 3


@dataclass(frozen=True)
class CallModel:
    """Make model call number ``step``; ``repeated`` when the previous worker had it in flight."""

    step: int
    repeated: bool


@dataclass(frozen=True)
class RunTools:
    """Execute (or surface) tool calls that were recorded as started but have no result."""

    calls: tuple[PendingToolCall, ...]


@dataclass(frozen=True)
class AwaitApprovals:
    """Tool calls wait for a person: take in decisions already made, else park the task."""

    requests: tuple[ev.ApprovalRequested, ...]


@dataclass(frozen=True)
class CheckPolicies:
    """Ask the agent's policies about the recorded response of ``step`` (and its tool calls)
    before anything acts on it."""

    step: int


@dataclass(frozen=True)
class Finish:
    """End the task with a stop reason from ``toren.core.events.STOP_REASONS``."""

    stop_reason: StopReason
    #: The final answer: text, or the JSON value it validated to (``output:``).
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class EndTurn:
    """A session's turn is over (the agent answered, or the turn hit ``max_steps``): record
    it and wait for the user's next message."""

    stop_reason: Literal["end_turn", "max_steps"]
    output: str | None = None


@dataclass(frozen=True)
class CheckOutput:
    """The model answered a task that declares ``output:``: check the answer (``text``, of
    model call ``step``) against the schema (``judge_output``) before the task finishes."""

    step: int
    text: str


@dataclass(frozen=True)
class Done:
    """The task already finished; nothing to do."""


TaskAction = (CallModel | RunTools | AwaitApprovals | Finish | EndTurn | CheckOutput | Done
              | CheckPolicies)


def next_task_action(state: TaskState, limits: Limits, epoch: int,
                     output: OutputSchema | None = None) -> TaskAction:
    """The next thing a task does, decided from its folded state and its limits (and the
    schema its final answer must match, if it has one: a session's turns are text)."""
    if state.finished is not None:
        return Done()
    if state.policy_step is not None:
        return CheckPolicies(state.policy_step)
    if state.pending_tools:
        return RunTools(tuple(state.pending_tools))
    if state.pending_approvals:  # after the step's other calls ran: they need no person
        return AwaitApprovals(tuple(state.pending_approvals))
    last = state.messages[-1] if state.messages else None
    partial = state.last_assistant.text if state.last_assistant else None
    if state.session:
        if state.close_requested is not None:
            return Finish("end_turn", output=partial)
        if state.awaiting_input or last is None:
            return Done()
        if last.role == "assistant" and not last.tool_calls:
            return EndTurn("end_turn", output=last.text)
    elif last is not None and last.role == "assistant" and not last.tool_calls:
        if output is not None:
            return CheckOutput(step=state.steps, text=last.text)
        return Finish("end_turn", output=last.text)
    if state.consecutive_invalid_calls >= MAX_CONSECUTIVE_INVALID_TOOL_CALLS:
        return Finish("error", output=partial, error={
            "code": "invalid_tool_calls",
            "message": f"the model made {state.consecutive_invalid_calls} invalid tool calls in "
                       "a row (unknown tools or arguments that do not match the schema)"})
    if state.steps - state.turn_first_step >= limits.max_steps:
        if state.session:
            return EndTurn("max_steps", output=partial)
        return Finish("max_steps", output=partial)
    if limits.max_budget_usd is not None:
        if state.unknown_cost_calls:
            return Finish("budget_exhausted", output=partial, error={
                "code": "unknown_cost",
                "message": "a budget is set but a model call's cost is unknown, so the budget "
                           "cannot be enforced; set pricing for the model"})
        if state.cost_usd >= limits.max_budget_usd:
            return Finish("budget_exhausted", output=partial)
    pending = state.model_call_pending
    repeated = pending is not None and pending.epoch != epoch
    return CallModel(step=state.steps + 1, repeated=repeated)


def judge_output(state: TaskState, output: OutputSchema, action: CheckOutput,
                 epoch: int) -> Finish | ev.OutputRejected:
    """The task's answer against its schema: finish with the parsed value, or a repair turn
    that tells the model what failed (at most ``MAX_OUTPUT_REPAIRS``), or, when the repairs
    are spent, fail with ``invalid_output`` naming the schema and what broke it."""
    checked = output.check(action.text)
    if checked.problem is None:
        return Finish("end_turn", output=checked.value)
    problem = checked.problem
    attempt = state.output_repairs + 1
    if attempt > MAX_OUTPUT_REPAIRS:
        return Finish("error", output=action.text, error={
            "code": "invalid_output",
            "message": f"the final answer does not match the output schema ({output.source}) "
                       f"after {state.output_repairs} repair turn(s): {problem.describe()}",
            "schema": output.source, "where": problem.where,
            "schema_path": problem.schema_path})
    return ev.OutputRejected(
        step=action.step, attempt=attempt, where=problem.where, problem=problem.message,
        schema_path=problem.schema_path, schema_source=output.source,
        text=repair_text(problem, output.schema, attempt, MAX_OUTPUT_REPAIRS), epoch=epoch)


def backoff_delay(attempt: int, *, base_s: float, cap_s: float, random_unit: float) -> float:
    """Seconds before retry ``attempt`` (1-based): exponential, capped, with "equal jitter".

    Half the window is fixed and half is random, so retries spread out but never fire at once.
    """
    window = min(cap_s, base_s * 2.0 ** (attempt - 1))
    return window / 2 + random_unit * window / 2


def truncate_output(text: str, max_bytes: int) -> tuple[str, bool, int]:
    """Cut ``text`` to at most ``max_bytes`` UTF-8 bytes with a visible marker.

    Returns the text, whether it was cut, and the original size in bytes.
    """
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text, False, len(encoded)
    kept = encoded[: max(0, max_bytes - _MARKER_ROOM)].decode("utf-8", errors="ignore")
    omitted = len(encoded) - len(kept.encode("utf-8"))
    marker = f"\n[truncated by Toren: {omitted} of {len(encoded)} bytes omitted]"
    return kept + marker, True, len(encoded)


#: Bytes reserved for the truncation marker, so the result stays within the cap.
_MARKER_ROOM = 80


def clean_text(text: str) -> str:
    """Text as JSON and Postgres can hold it: NUL characters and unpaired surrogates (which a
    model or a tool may produce) become U+FFFD; everything else is kept as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: through UTF-16, which pairs what pairs
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def clean_json(value: Any) -> Any:
    """``clean_text`` applied to every string (and key) of a JSON value."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def normalize_calls(calls: Sequence[ToolCall], earlier_ids: Container[str],
                    step: int) -> tuple[ToolCall, ...]:
    """The model's tool calls as they are recorded: every call has an id unique in the task
    (a missing or repeated id gets a fresh one, so each call gets its own result), text is
    cleaned, and arguments that are not a JSON object become an ``arguments_error``.
    ``earlier_ids`` is only asked about (the task's set, not copied per answer)."""
    taken: set[str] = set()
    normalized = []
    for index, call in enumerate(calls):
        call_id = clean_text(call.id) or f"call_{step}_{index}"
        base, n = call_id, 1
        while call_id in taken or call_id in earlier_ids:
            n += 1
            call_id = f"{base}_{n}"
        taken.add(call_id)
        arguments, error = call.arguments, call.arguments_error
        if not isinstance(arguments, dict):
            arguments, error = {}, error or (
                f"the arguments must be a JSON object, not {type(arguments).__name__}")
        normalized.append(replace(call, id=call_id, name=clean_text(call.name),
                                  arguments=clean_json(arguments),
                                  arguments_error=clean_text(error) if error else None))
    return tuple(normalized)


#: The integers Postgres' JSON (and the drivers reading it back) keep exactly.
MIN_INT, MAX_INT = -(2**63), 2**64 - 1
#: Arrays and objects nested deeper than this are refused. The store's JSON encoder stops at
#: 254 levels, and a value is stored inside a few levels of event payload (a wave's task
#: inside its spec, inside the event): this leaves room for all of them.
MAX_JSON_DEPTH = 128


def unstorable(value: Any, *, nesting_only: bool = False) -> str | None:
    """Why the run log cannot store ``value`` (parsed JSON), or ``None`` if it can.

    Postgres refuses NUL in text and JSON; unpaired surrogates are not UTF-8; numbers must fit
    in 64 bits; arrays and objects may nest at most ``MAX_JSON_DEPTH`` levels. Inputs and
    messages are checked with it before anything is written. ``nesting_only``: the depth
    alone (a chat webhook's body, whose few fields kept are cleaned rather than refused).
    """
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:  # not recursive: a JSON parser allows nesting deeper than Python's stack
        item, depth = pending.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                return (f"arrays and objects may be nested at most {MAX_JSON_DEPTH} levels "
                        "deep")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending += [(child, depth + 1) for child in children]
        elif nesting_only:
            continue
        elif isinstance(item, str):
            if "\x00" in item:
                return "strings may not contain NUL (\\u0000)"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "strings may not contain unpaired surrogates"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must fit in a 64-bit float"
        elif isinstance(item, int) and not isinstance(item, bool) and not (
                MIN_INT <= item <= MAX_INT):
            return "integers must fit in 64 bits"
    return None
